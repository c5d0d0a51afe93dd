// Command sessionmem measures what a connected instance costs pawld in
// memory: an instance holding its SessionService session, with one set of
// assignments and two watches, and each further watch on a session. It
// starts pawld as its own process (with --pprof, to force a garbage
// collection before reading its Go heap from /metrics), and prints a
// Markdown table with a column per layout of the sessions on connections:
//
//	go run ./bench/sessionmem -sessions 10000 -layouts own,64
//
// For each layout, on a fresh pawld: a warm-up of 100 sessions like the
// others; then the baseline; then N sessions, each opening two watches on
// its own prefixes, and one release of one config whose one stage takes
// every live instance, so that each session holds one assignment set of
// one assignment; then -more-watches further watches on every session.
// The growth of pawld's resident memory (VmRSS) and of its Go heap and
// stacks after a GC, divided by N (and by the further watches), is the
// cost per instance and per further watch. RSS also counts heap the
// runtime has not returned to the system, so it is the upper bound.
//
// Layouts: "own" gives every session its own HTTP/2 connection (as a fleet
// of separate processes has); a number spreads the sessions over that
// many connections.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pawlcfg/pawl/bench/internal/benchkit"
	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
)

type options struct {
	sessions, moreWatches, workers int
	layouts, pawld, profiles       string
}

const warmup = 100

func main() {
	var o options
	flag.IntVar(&o.sessions, "sessions", 10000, "sessions measured (after a warm-up of 100)")
	flag.IntVar(&o.moreWatches, "more-watches", 4, "further watches per session, to measure a watch's cost")
	flag.IntVar(&o.workers, "workers", 64, "sessions opened at a time")
	flag.StringVar(&o.layouts, "layouts", "own,64", `sessions on connections, each layout on a fresh pawld: "own" (a connection per session) or a number of connections`)
	flag.StringVar(&o.pawld, "pawld", "", "pawld binary (default: built from ./cmd/pawld)")
	flag.StringVar(&o.profiles, "profiles", "", "write pawld's heap profile with the sessions open to this directory, per layout")
	flag.Parse()
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "sessionmem:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	grid := &benchkit.Grid{Name: "sessionmem"}
	fmt.Printf("%d CPUs, %s; %d sessions (after %d), each with one assignment and 2 watches, then %d more watches each\n\n",
		runtime.NumCPU(), runtime.Version(), o.sessions, warmup, o.moreWatches)
	for _, layout := range strings.Split(o.layouts, ",") {
		conns := 0 // a connection per session
		col := "a connection per session"
		if layout != "own" {
			n, err := strconv.Atoi(layout)
			if err != nil || n < 1 {
				return fmt.Errorf("-layouts: %q is neither own nor a number of connections", layout)
			}
			conns, col = n, fmt.Sprintf("%d sessions per connection (%d connections)", (o.sessions+n-1)/n, n)
		}
		if err := measure(ctx, o, conns, col, grid); err != nil {
			return fmt.Errorf("layout %s: %w", layout, err)
		}
	}
	grid.Print(os.Stdout)
	return nil
}

// fleet is the sessions of one layout.
type fleet struct {
	o        options
	srv      *benchkit.Pawld
	pprofURL string
	conns    int
	clients  []*http.Client
	sessions []*benchkit.Session
	mu       sync.Mutex
	watchErr error
	started  sync.WaitGroup // a watch's started (or error) message
	assigned sync.WaitGroup // a session's first set holding the config
}

func h2c() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}

func measure(ctx context.Context, o options, conns int, col string, grid *benchkit.Grid) error {
	dir, err := os.MkdirTemp("", "pawl-sessionmem")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	pprofAddr, err := benchkit.FreeAddr()
	if err != nil {
		return err
	}
	srv, err := benchkit.StartPawld(ctx, o.pawld, dir, "--instance-lease", "60s", "--pprof", pprofAddr)
	if err != nil {
		return err
	}
	defer srv.Stop()
	f := &fleet{o: o, srv: srv, pprofURL: "http://" + pprofAddr, conns: conns}
	defer f.close()
	for range conns {
		f.clients = append(f.clients, h2c())
	}
	unary := h2c()
	up, err := benchkit.UploadValidator(ctx, unary, srv.URL, dir, "routing")
	if err != nil {
		return err
	}
	if err := f.open(ctx, 0, warmup); err != nil {
		return err
	}
	m0, err := benchkit.ReadMemory(ctx, srv.Pid(), srv.URL, f.pprofURL)
	if err != nil {
		return err
	}
	if err := f.open(ctx, warmup, warmup+o.sessions); err != nil {
		return err
	}
	f.assigned.Add(warmup + o.sessions)
	if err := release(ctx, unary, srv.URL, up); err != nil {
		return err
	}
	f.assigned.Wait()
	m1, err := benchkit.ReadMemory(ctx, srv.Pid(), srv.URL, f.pprofURL)
	if err != nil {
		return err
	}
	if o.profiles != "" {
		file := filepath.Join(o.profiles, fmt.Sprintf("sessions-%d-conns.heap.pprof", conns))
		if err := benchkit.SaveProfile(ctx, f.pprofURL+"/debug/pprof/heap", file); err != nil {
			return err
		}
	}
	if err := f.watch(ctx, 3, 2+o.moreWatches); err != nil {
		return err
	}
	m2, err := benchkit.ReadMemory(ctx, srv.Pid(), srv.URL, f.pprofURL)
	if err != nil {
		return err
	}
	n, w := float64(o.sessions), float64((warmup+o.sessions)*o.moreWatches)
	kib := func(d int64, per float64) string { return fmt.Sprintf("%.1f KiB", float64(d)/per/1024) }
	grid.Set("pawld baseline (warm-up sessions open): resident, heap, stacks, goroutines", col, show(m0))
	grid.Set(fmt.Sprintf("with %d more sessions, each with one assignment and 2 watches", o.sessions), col, show(m1))
	grid.Set(fmt.Sprintf("with %d more watches on each session", o.moreWatches), col, show(m2))
	grid.Set("per instance (session, one assignment, 2 watches): resident", col, kib(m1.RSS-m0.RSS, n))
	grid.Set("per instance: Go heap + stacks after a GC", col, kib(m1.HeapInuse+m1.StackInuse-m0.HeapInuse-m0.StackInuse, n))
	grid.Set("per instance: goroutines", col, fmt.Sprintf("%.2f", float64(m1.Goroutines-m0.Goroutines)/n))
	grid.Set("per further watch: resident", col, kib(m2.RSS-m1.RSS, w))
	grid.Set("per further watch: Go heap + stacks after a GC", col, kib(m2.HeapInuse+m2.StackInuse-m1.HeapInuse-m1.StackInuse, w))
	return nil
}

func show(m benchkit.Memory) string {
	return fmt.Sprintf("%.1f MiB, %.1f MiB, %.1f MiB, %d", mib(m.RSS), mib(m.HeapInuse), mib(m.StackInuse), m.Goroutines)
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// open opens sessions from to to-1, each with watches 1 and 2, and waits
// until the watches started.
func (f *fleet) open(ctx context.Context, from, to int) error {
	if err := benchkit.Parallel(f.o.workers, to-from, func(i int) error { return f.openOne(ctx, from+i) }); err != nil {
		return err
	}
	return f.watch(ctx, 1, 2, f.sessions[from:to]...)
}

func (f *fleet) openOne(ctx context.Context, k int) error {
	client := h2c()
	if f.conns > 0 {
		client = f.clients[k%f.conns]
	}
	id := fmt.Sprintf("mem-%05d", k)
	var once sync.Once
	s, err := benchkit.OpenSession(ctx, pawlv1connect.NewSessionServiceClient(client, f.srv.URL, connect.WithGRPC()),
		&pawlv1.SessionHello{Instance: &pawlv1.Instance{WorkloadIdentity: id, BootId: "boot-1", Zone: "zone-a", Role: "worker", TrafficWeight: 1, AppVersion: "1.0.0"}},
		benchkit.SessionHandlers{
			Assignments: func(a *pawlv1.WatchAssignmentsResponse) {
				for _, as := range a.GetAssignments() {
					if as.GetConfigId() == config {
						once.Do(f.assigned.Done)
					}
				}
			},
			Watch: func(m *pawlv1.SessionWatchMessage) {
				if m.GetResponse().GetStarted() != nil {
					f.started.Done()
					return
				}
				if e := m.GetError(); e != nil {
					f.mu.Lock()
					f.watchErr = fmt.Errorf("watch %d of %s: %s: %s", m.GetWatchId(), id, e.GetCode(), e.GetMessage())
					f.mu.Unlock()
					f.started.Done()
				}
			},
		})
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.sessions) <= k {
		f.sessions = append(f.sessions, nil)
	}
	f.sessions[k] = s
	return nil
}

// watch opens watches first to last on the sessions (all of them when
// none are given), each on a prefix of its own, and waits until they
// started.
func (f *fleet) watch(ctx context.Context, first, last int, sessions ...*benchkit.Session) error {
	if sessions == nil {
		sessions = f.sessions
	}
	for k, s := range sessions {
		for w := first; w <= last; w++ {
			f.started.Add(1)
			if err := s.Watch(int64(w), &pawlv1.WatchRequest{Prefix: fmt.Sprintf("/mem/%s/%d/", s.Record.GetInstance().GetWorkloadIdentity(), w)}); err != nil {
				return fmt.Errorf("watch %d on session %d: %w", w, k, err)
			}
		}
	}
	done := make(chan struct{})
	go func() {
		f.started.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		return errors.New("watches not all started in 5 minutes")
	case <-ctx.Done():
		return ctx.Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.watchErr
}

func (f *fleet) close() {
	for _, s := range f.sessions {
		if s != nil {
			s.Close()
		}
	}
}

// config is the one config every session is assigned.
const config = "mem"

// release creates a release of config whose one stage takes every live
// instance: each is assigned it at once.
func release(ctx context.Context, client *http.Client, url, validator string) error {
	noGate := 0.0
	_, err := pawlv1connect.NewReleaseServiceClient(client, url, connect.WithGRPC()).CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: &pawlv1.ReleaseSpec{
		ConfigId: config, MediaType: "application/json", ValidatorDigest: validator,
		Content:      []byte(`{"upstreams":[{"host":"a","weight":50},{"host":"b","weight":50}]}`),
		Stages:       []*pawlv1.Stage{{Name: "all", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}}},
		HealthWindow: durationpb.New(0), Deadline: durationpb.New(24 * time.Hour), MinCoverage: &noGate,
	}}))
	return err
}
