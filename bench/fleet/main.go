// Command fleet measures pawld under a simulated fleet: thousands of
// registered instances and a hundred configs with an active release. It
// starts pawld as its own process (so its CPU and memory are its own),
// drives it over loopback with real gRPC clients, and prints a Markdown
// table with a column per mode:
//
//	go run ./bench/fleet -instances 10000 -configs 100 -modes unary,session
//
// The modes are how each instance talks to pawld, each measured on a
// fresh pawld:
//   - unary: Register, an assignment stream (WatchAssignments with
//     deltas, as the SDK followed it before sessions) and a unary Ack call
//     per ACK, 64 callers at a time;
//   - session: one SessionService.Session stream per instance, which
//     registers it (the hello), holds its lease, carries its assignments
//     and its ACKs; every instance ACKs at once, each waiting for the
//     answer (the ACK is durable) before its next ACK.
//
// What it measures, in order:
//   - the time until every stream holds its first assignment set;
//   - Promote to every stream holding the new generation (p50, p99 and
//     max over the streams, for each of several promotions);
//   - ACK ingestion with every stream connected: every instance reports
//     APPLIED then HEALTHY_ACKED for a release of every instance
//     (ACKs per second, pawld CPU per ACK);
//   - GetRolloutStatus latency of that release (p50, p99);
//   - pawld CPU and memory while idle: streams connected, each holding its
//     instance's lease (or, with -rpc-heartbeats, every instance calling
//     Heartbeat every lease/3).
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
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pawlcfg/pawl/bench/internal/benchkit"
	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
)

type options struct {
	instances, configs, conns, workers, promotions, statusCalls int
	retainRevisions                                             int64
	idle, lease                                                 time.Duration
	pawld, pprof, modes, profiles                               string
	rpcHeartbeats                                               bool
}

const (
	unary   = "unary"
	session = "session"
)

func main() {
	var o options
	flag.IntVar(&o.instances, "instances", 10000, "registered instances, each with an assignment stream")
	flag.IntVar(&o.configs, "configs", 100, "configs, each with an active release")
	flag.IntVar(&o.conns, "connections", 64, "HTTP/2 connections the streams share")
	flag.IntVar(&o.workers, "workers", 64, "concurrent callers for registrations, ACKs and heartbeats")
	flag.IntVar(&o.promotions, "promotions", 5, "promotions to time")
	flag.IntVar(&o.statusCalls, "status-calls", 50, "GetRolloutStatus calls to time")
	flag.DurationVar(&o.idle, "idle", 30*time.Second, "how long to measure pawld idle (streams connected, heartbeats flowing)")
	flag.DurationVar(&o.lease, "lease", 30*time.Second, "instance lease; instances heartbeat every third of it")
	flag.StringVar(&o.pawld, "pawld", "", "pawld binary (default: built from ./cmd/pawld)")
	flag.StringVar(&o.pprof, "pprof", "", "have pawld serve its profiles on this address (pawld --pprof)")
	flag.Int64Var(&o.retainRevisions, "retain-revisions", 0, "pawld --retain-revisions (0: pawld's default); the report says whether the ACKs compacted away the history a watcher resumes from")
	flag.BoolVar(&o.rpcHeartbeats, "rpc-heartbeats", false, "unary mode: keep leases with Heartbeat calls every lease/3 instead of with the assignment streams (boot_id)")
	flag.StringVar(&o.modes, "modes", unary+","+session, "modes to measure, each on a fresh pawld, in order: unary, session")
	flag.StringVar(&o.profiles, "profiles", "", "write pawld's CPU profile of the ACK phase, its allocation profiles before and after it, and its heap profile at idle to this directory, per mode")
	flag.Parse()
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	report := &benchkit.Grid{Name: "fleet"}
	fmt.Printf("%d CPUs, %s; %d instances on %d connections, %d configs\n\n", runtime.NumCPU(), runtime.Version(), o.instances, o.conns, o.configs)
	for _, mode := range strings.Split(o.modes, ",") {
		if mode != unary && mode != session {
			return fmt.Errorf("-modes: unknown mode %q", mode)
		}
		if mode == session && o.rpcHeartbeats {
			return errors.New("-rpc-heartbeats: sessions hold their leases; measure it with -modes unary")
		}
		if err := runMode(ctx, o, mode, report); err != nil {
			return fmt.Errorf("%s mode: %w", mode, err)
		}
	}
	report.Print(os.Stdout)
	return nil
}

func runMode(ctx context.Context, o options, mode string, grid *benchkit.Grid) error {
	dir, err := os.MkdirTemp("", "pawl-fleet")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	args := []string{"--instance-lease", o.lease.String()}
	if o.retainRevisions > 0 {
		args = append(args, "--retain-revisions", strconv.FormatInt(o.retainRevisions, 10))
	}
	pprofAddr := o.pprof
	if pprofAddr == "" {
		if pprofAddr, err = benchkit.FreeAddr(); err != nil {
			return err
		}
	}
	args = append(args, "--pprof", pprofAddr)
	srv, err := benchkit.StartPawld(ctx, o.pawld, dir, args...)
	if err != nil {
		return err
	}
	defer srv.Stop()
	b := newBench(o, srv, mode)
	b.pprofURL = "http://" + pprofAddr
	defer b.close()
	column := mode
	if o.rpcHeartbeats {
		column = fmt.Sprintf("%s, Heartbeat calls every %s", mode, o.lease/3)
	}
	report := &cells{grid: grid, col: column}

	validator, err := benchkit.UploadValidator(ctx, b.unary, srv.URL, dir, "routing")
	if err != nil {
		return err
	}
	if mode == unary {
		if err := b.register(ctx); err != nil {
			return err
		}
	}
	// With -rpc-heartbeats, instances heartbeat from now on, every
	// lease/3; otherwise their assignment streams hold their leases.
	if o.rpcHeartbeats {
		hbCtx, stopHeartbeats := context.WithCancel(ctx)
		heartbeats := make(chan error, 1)
		go func() { heartbeats <- b.heartbeat(hbCtx) }()
		defer func() {
			stopHeartbeats()
			<-heartbeats
		}()
	}
	start := time.Now()
	if err := b.openStreams(ctx); err != nil {
		return err
	}
	report.Add("all streams hold their first set (session: with the registration)", time.Since(start).Round(time.Millisecond).String())

	start = time.Now()
	if err := b.activate(ctx, validator); err != nil {
		return err
	}
	report.Add(fmt.Sprintf("%d configs created, canaried and promoted", o.configs), time.Since(start).Round(time.Millisecond).String())

	var p50s, p99s, maxes []time.Duration
	for i := range o.promotions {
		d, err := b.promote(ctx, validator, fmt.Sprintf("cfg-%03d", i%o.configs))
		if err != nil {
			return err
		}
		p50s, p99s, maxes = append(p50s, benchkit.Percentile(d, 0.50)), append(p99s, benchkit.Percentile(d, 0.99)), append(maxes, d[len(d)-1])
	}
	report.Add("Promote to every stream holding it: p50 over streams, per promotion", benchkit.Durations(p50s))
	report.Add("Promote to every stream holding it: p99 over streams, per promotion", benchkit.Durations(p99s))
	report.Add("Promote to every stream holding it: slowest stream, per promotion", benchkit.Durations(maxes))

	kv := pawlv1connect.NewKVServiceClient(b.unary, srv.URL)
	mark, err := putMarker(ctx, kv)
	if err != nil {
		return err
	}
	acks, took, cpu, err := b.ingest(ctx, validator, o.profiles)
	if err != nil {
		return err
	}
	taken, kept, err := resumable(ctx, kv, mark)
	if err != nil {
		return err
	}
	report.Add("revisions the ingest release and its ACKs took", strconv.FormatInt(taken, 10))
	report.Add("a watch from before the ACKs can still resume", kept)
	report.Add("ACKs ingested (APPLIED, then HEALTHY_ACKED, of every instance)", strconv.Itoa(acks))
	report.Add("ACKs per second", fmt.Sprintf("%.0f", float64(acks)/took.Seconds()))
	report.Add("pawld CPU per ACK", (cpu / time.Duration(acks)).Round(time.Microsecond).String())

	lat, size, err := b.status(ctx)
	if err != nil {
		return err
	}
	report.Add(fmt.Sprintf("GetRolloutStatus of %d members: p50, p99", o.instances), fmt.Sprintf("%s, %s (%d bytes)",
		benchkit.Percentile(lat, 0.5).Round(time.Microsecond), benchkit.Percentile(lat, 0.99).Round(time.Microsecond), size))

	cpuShare, err := b.idle(ctx)
	if err != nil {
		return err
	}
	report.Add(fmt.Sprintf("pawld CPU while idle for %s (of one core)", o.idle), fmt.Sprintf("%.1f%%", 100*cpuShare))
	report.Add("pawld CPU while idle (of all cores)", fmt.Sprintf("%.1f%%", 100*cpuShare/float64(runtime.NumCPU())))
	rss, err := benchkit.RSS(srv.Pid())
	if err != nil {
		return err
	}
	report.Add("pawld resident memory", fmt.Sprintf("%d MiB", rss>>20))
	mem, err := benchkit.ReadMemory(ctx, srv.Pid(), srv.URL, b.pprofURL)
	if err != nil {
		return err
	}
	report.Add("pawld after a GC: resident, Go heap in use, stacks, goroutines", fmt.Sprintf("%d MiB, %d MiB, %d MiB, %d",
		mem.RSS>>20, mem.HeapInuse>>20, mem.StackInuse>>20, mem.Goroutines))
	report.Add("pawld after a GC: resident anonymous, resident file-backed (bbolt's map, the binary)", fmt.Sprintf("%d MiB, %d MiB",
		mem.Resident.Anon>>20, mem.Resident.File>>20))
	if o.profiles != "" {
		return benchkit.SaveProfile(ctx, b.pprofURL+"/debug/pprof/heap", filepath.Join(o.profiles, mode+"-idle.heap.pprof"))
	}
	return nil
}

// cells adds a mode's measures to its column of the grid.
type cells struct {
	grid *benchkit.Grid
	col  string
}

func (c *cells) Add(row, value string) { c.grid.Set(row, c.col, value) }

// stream is one instance's assignment stream, as the instance sees it.
type stream struct {
	id     string
	mu     sync.Mutex
	gens   map[string]int64     // config -> generation it runs
	stages map[string]string    // config -> stage of a canary assignment
	seen   map[string]time.Time // "config@gen" -> when it first arrived
	first  chan struct{}        // closed on the first message
	opened bool                 // first is closed
}

// apply applies a set of assignments, as the SDK does.
func (s *stream) apply(msg *pawlv1.WatchAssignmentsResponse) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if msg.GetFull() {
		clear(s.gens)
		clear(s.stages)
	}
	for _, config := range msg.GetRemovedConfigIds() {
		delete(s.gens, config)
		delete(s.stages, config)
	}
	for _, a := range msg.GetAssignments() {
		if a.GetShadow() {
			continue
		}
		s.gens[a.GetConfigId()] = a.GetGeneration()
		s.stages[a.GetConfigId()] = a.GetStage()
		key := fmt.Sprintf("%s@%d", a.GetConfigId(), a.GetGeneration())
		if _, ok := s.seen[key]; !ok {
			s.seen[key] = now
		}
	}
	if !s.opened {
		s.opened = true
		close(s.first)
	}
}

type bench struct {
	o        options
	mode     string
	pprofURL string
	srv      *benchkit.Pawld
	clients  []*http.Client
	unary    *http.Client
	is       pawlv1connect.InstanceServiceClient
	rs       pawlv1connect.ReleaseServiceClient
	ro       pawlv1connect.RolloutServiceClient
	ids      []string
	conn     map[string]int // instance -> index of the connection it uses
	acker    []pawlv1connect.RolloutServiceClient
	epochs   map[string]int64
	streams  map[string]*stream
	sessions map[string]*benchkit.Session // session mode: instance -> its session
	smu      sync.Mutex                   // guards sessions and epochs while they open
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	ingested *pawlv1.Release
	// heartbeatsFailed counts heartbeats that failed.
	heartbeatsFailed atomic.Int64
}

func h2c(streams int) *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p, HTTP2: &http.HTTP2Config{MaxConcurrentStreams: streams}}}
}

func newBench(o options, srv *benchkit.Pawld, mode string) *bench {
	b := &bench{o: o, mode: mode, srv: srv, unary: h2c(0), epochs: map[string]int64{}, streams: map[string]*stream{}, conn: map[string]int{},
		sessions: map[string]*benchkit.Session{}}
	for range o.conns {
		b.clients = append(b.clients, h2c(0))
	}
	b.is = pawlv1connect.NewInstanceServiceClient(b.unary, srv.URL, connect.WithGRPC())
	b.rs = pawlv1connect.NewReleaseServiceClient(b.unary, srv.URL, connect.WithGRPC())
	b.ro = pawlv1connect.NewRolloutServiceClient(b.unary, srv.URL, connect.WithGRPC())
	for i := range o.instances {
		b.ids = append(b.ids, fmt.Sprintf("i-%05d", i))
		b.conn[b.ids[i]] = i % o.conns
	}
	for _, c := range b.clients {
		b.acker = append(b.acker, pawlv1connect.NewRolloutServiceClient(c, srv.URL, connect.WithGRPC()))
	}
	return b
}

func (b *bench) close() {
	for _, s := range b.sessions {
		s.Close()
	}
	if b.cancel != nil {
		b.cancel()
	}
	b.wg.Wait()
}

// parallel runs fn on every item with the configured number of workers.
func (b *bench) parallel(n int, fn func(i int) error) error {
	return benchkit.Parallel(b.o.workers, n, fn)
}

func (b *bench) register(ctx context.Context) error {
	var mu sync.Mutex
	return b.parallel(len(b.ids), func(i int) error {
		id := b.ids[i]
		resp, err := b.is.Register(ctx, connect.NewRequest(&pawlv1.RegisterRequest{Instance: instance(i, id)}))
		if err != nil {
			return fmt.Errorf("register %s: %w", id, err)
		}
		mu.Lock()
		b.epochs[id] = resp.Msg.GetRecord().GetMembershipEpoch()
		mu.Unlock()
		return nil
	})
}

// instance is the i-th simulated instance.
func instance(i int, id string) *pawlv1.Instance {
	return &pawlv1.Instance{WorkloadIdentity: id, BootId: "boot-1", Zone: fmt.Sprintf("zone-%c", 'a'+i%3), Role: "worker", TrafficWeight: 1, AppVersion: "1.0.0"}
}

// openStreams opens every instance's assignment stream or session, spread
// over the connections, and waits until each holds its first set.
func (b *bench) openStreams(ctx context.Context) error {
	sctx, cancel := context.WithCancel(ctx)
	b.cancel = cancel
	for _, id := range b.ids {
		b.streams[id] = &stream{id: id, gens: map[string]int64{}, stages: map[string]string{}, seen: map[string]time.Time{}, first: make(chan struct{})}
	}
	if b.mode == session {
		if err := b.openSessions(sctx); err != nil {
			return err
		}
	} else {
		b.openAssignmentStreams(sctx)
	}
	timeout := time.After(10 * time.Minute)
	for _, s := range b.streams {
		select {
		case <-s.first:
		case <-timeout:
			return errors.New("streams did not all receive their first set in 10 minutes")
		}
	}
	return nil
}

// openSessions opens every instance's session, which registers it.
func (b *bench) openSessions(ctx context.Context) error {
	return b.parallel(len(b.ids), func(i int) error {
		id := b.ids[i]
		client := pawlv1connect.NewSessionServiceClient(b.clients[i%len(b.clients)], b.srv.URL, connect.WithGRPC())
		s, err := benchkit.OpenSession(ctx, client, &pawlv1.SessionHello{Instance: instance(i, id)},
			benchkit.SessionHandlers{Assignments: b.streams[id].apply})
		if err != nil {
			return err
		}
		b.smu.Lock()
		b.sessions[id] = s
		b.epochs[id] = s.Record.GetMembershipEpoch()
		b.smu.Unlock()
		return nil
	})
}

// openAssignmentStreams opens every instance's WatchAssignments stream.
func (b *bench) openAssignmentStreams(sctx context.Context) {
	for i, id := range b.ids {
		s := b.streams[id]
		client := pawlv1connect.NewInstanceServiceClient(b.clients[i%len(b.clients)], b.srv.URL, connect.WithGRPC())
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			req := &pawlv1.WatchAssignmentsRequest{WorkloadIdentity: id, Deltas: true}
			if !b.o.rpcHeartbeats {
				req.BootId = "boot-1"
			}
			st, err := client.WatchAssignments(sctx, connect.NewRequest(req))
			if err != nil {
				return
			}
			defer st.Close()
			for st.Receive() {
				s.apply(st.Msg())
			}
		}()
	}
}

// spec is a release of config with one stage. Its simulated instances
// report only what a measure needs, so the coverage gate is off
// (min_coverage 0): the promotions measured are the pointer's fan-out.
func (b *bench) spec(config, validator string, weight int, stage *pawlv1.Stage) *pawlv1.ReleaseSpec {
	noGate := 0.0
	return &pawlv1.ReleaseSpec{
		ConfigId: config, MediaType: "application/json", ValidatorDigest: validator,
		Content: []byte(fmt.Sprintf(`{"upstreams":[{"host":"a","weight":%d},{"host":"b","weight":%d}]}`, weight, 100-weight)),
		Stages:  []*pawlv1.Stage{stage}, HealthWindow: durationpb.New(0), Deadline: durationpb.New(24 * time.Hour),
		MinCoverage: &noGate,
	}
}

// canary is a stage that takes one instance in ten thousand (at least one).
var canary = &pawlv1.Stage{Name: "canary", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_FRACTION, Fraction: 0.0001}}

// waitFor waits until every stream satisfies cond, or a timeout.
func (b *bench) waitFor(what string, limit time.Duration, cond func(s *stream) bool) error {
	deadline := time.Now().Add(limit)
	for _, s := range b.streams {
		for {
			s.mu.Lock()
			ok := cond(s)
			s.mu.Unlock()
			if ok {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: not all streams within %s", what, limit)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	return nil
}

// release creates a release of config with the canary stage, has its
// canaries report healthy, and returns it with its canaries.
func (b *bench) release(ctx context.Context, config, validator string, weight int) (*pawlv1.Release, error) {
	resp, err := b.rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: b.spec(config, validator, weight, canary)}))
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", config, err)
	}
	rel := resp.Msg.GetRelease()
	gen := rel.GetGeneration()
	var cohort []string
	deadline := time.Now().Add(5 * time.Minute)
	for len(cohort) == 0 {
		for id, s := range b.streams {
			s.mu.Lock()
			if s.gens[config] == gen && s.stages[config] == "canary" {
				cohort = append(cohort, id)
			}
			s.mu.Unlock()
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s@%d reached no canary", config, gen)
		}
		if len(cohort) == 0 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	for _, id := range cohort {
		if err := b.ack(ctx, rel, id, pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED, gen); err != nil {
			return nil, err
		}
	}
	return rel, nil
}

// ack reports for id on its session, or with an Ack call over the
// connection its stream uses, as an instance does.
func (b *bench) ack(ctx context.Context, rel *pawlv1.Release, id string, state pawlv1.InstanceState, seq int64) error {
	ack := &pawlv1.Ack{
		ConfigId: rel.GetSpec().GetConfigId(), Generation: rel.GetGeneration(), WorkloadIdentity: id, BootId: "boot-1",
		MembershipEpoch: b.epochs[id], ApplySequence: seq, ContentDigest: rel.GetContentDigest(),
		ValidatorDigest: rel.GetSpec().GetValidatorDigest(), State: state, HealthOk: true,
	}
	var stored *pawlv1.Ack
	if b.mode == session {
		r, err := b.sessions[id].Ack(ctx, ack)
		if err != nil {
			return fmt.Errorf("ack %s: %w", id, err)
		}
		if e := r.GetError(); e != nil {
			return fmt.Errorf("ack %s: %s: %s", id, e.GetCode(), e.GetMessage())
		}
		stored = r.GetAck()
	} else {
		resp, err := b.acker[b.conn[id]].Ack(ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: ack}))
		if err != nil {
			return fmt.Errorf("ack %s: %w", id, err)
		}
		stored = resp.Msg.GetAck()
	}
	if !stored.GetCounted() {
		return fmt.Errorf("ack of %s not counted: %s", id, stored.GetNotCountedReason())
	}
	return nil
}

func (b *bench) promoteTo(ctx context.Context, rel *pawlv1.Release) error {
	config := rel.GetSpec().GetConfigId()
	ptr, err := b.ro.GetPointer(ctx, connect.NewRequest(&pawlv1.GetPointerRequest{ConfigId: config}))
	if err != nil {
		return err
	}
	_, err = b.ro.Promote(ctx, connect.NewRequest(&pawlv1.PromoteRequest{ConfigId: config, Generation: rel.GetGeneration(),
		ExpectedGeneration: ptr.Msg.GetPointer().GetGeneration(), ExpectedEpoch: ptr.Msg.GetPointer().GetEpoch(),
		IdempotencyKey: fmt.Sprintf("%s-%d", config, rel.GetGeneration())}))
	return err
}

// activate gives every config an active first release.
func (b *bench) activate(ctx context.Context, validator string) error {
	for c := range b.o.configs {
		rel, err := b.release(ctx, fmt.Sprintf("cfg-%03d", c), validator, 50)
		if err != nil {
			return err
		}
		if err := b.promoteTo(ctx, rel); err != nil {
			return err
		}
	}
	return b.waitFor("every config active", 10*time.Minute, func(s *stream) bool { return len(s.gens) == b.o.configs })
}

// promote releases a new generation of config, canaries it, promotes it,
// and returns, sorted, how long after the Promote call each stream held it.
func (b *bench) promote(ctx context.Context, validator, config string) ([]time.Duration, error) {
	rel, err := b.release(ctx, config, validator, 60)
	if err != nil {
		return nil, err
	}
	gen := rel.GetGeneration()
	start := time.Now()
	if err := b.promoteTo(ctx, rel); err != nil {
		return nil, err
	}
	key := fmt.Sprintf("%s@%d", config, gen)
	if err := b.waitFor("promotion of "+key, 5*time.Minute, func(s *stream) bool { return s.gens[config] == gen && s.stages[config] == "" }); err != nil {
		return nil, err
	}
	var out []time.Duration
	for _, s := range b.streams {
		s.mu.Lock()
		at := s.seen[key]
		s.mu.Unlock()
		out = append(out, max(0, at.Sub(start)))
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

// ingest sends APPLIED then HEALTHY_ACKED from every instance for a
// release of config "ingest" whose one stage takes everyone: in unary mode
// from the configured number of callers, in session mode from every
// instance at once. With profiles set, it writes pawld's CPU profile of
// the ACKs there, and its allocation profiles from just before and just
// after them.
func (b *bench) ingest(ctx context.Context, validator, profiles string) (int, time.Duration, time.Duration, error) {
	all := &pawlv1.Stage{Name: "all", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}}
	resp, err := b.rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: b.spec("ingest", validator, 50, all)}))
	if err != nil {
		return 0, 0, 0, err
	}
	rel := resp.Msg.GetRelease()
	b.ingested = rel
	members := map[string]bool{}
	for _, m := range rel.GetMembership() {
		members[m.GetWorkloadIdentity()] = true
	}
	if len(members) != len(b.ids) {
		return 0, 0, 0, fmt.Errorf("the ingest release froze %d members of %d instances: leases lapsed", len(members), len(b.ids))
	}
	if err := b.waitFor("the ingest release assigned", 10*time.Minute, func(s *stream) bool { return s.gens["ingest"] == rel.GetGeneration() }); err != nil {
		return 0, 0, 0, err
	}
	workers := b.o.workers
	if b.mode == session {
		workers = len(b.ids)
	}
	profiled := make(chan error, 1)
	if profiles != "" {
		// The allocations before and after the ACKs (each after a
		// collection, outside the CPU measured): pprof -diff_base of the
		// two is what the ACKs allocated.
		if err := benchkit.SaveProfile(ctx, b.pprofURL+"/debug/pprof/allocs?gc=1", filepath.Join(profiles, b.mode+"-acks-before.allocs.pprof")); err != nil {
			return 0, 0, 0, err
		}
		go func() {
			profiled <- benchkit.SaveProfile(ctx, b.pprofURL+"/debug/pprof/profile?seconds=4", filepath.Join(profiles, b.mode+"-acks.cpu.pprof"))
		}()
	} else {
		profiled <- nil
	}
	cpu0, err := benchkit.CPU(b.srv.Pid())
	if err != nil {
		return 0, 0, 0, err
	}
	start := time.Now()
	for _, state := range []pawlv1.InstanceState{pawlv1.InstanceState_INSTANCE_STATE_APPLIED, pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED} {
		if err := benchkit.Parallel(workers, len(b.ids), func(i int) error { return b.ack(ctx, rel, b.ids[i], state, 1) }); err != nil {
			return 0, 0, 0, err
		}
	}
	took := time.Since(start)
	cpu1, err := benchkit.CPU(b.srv.Pid())
	if err != nil {
		return 0, 0, 0, err
	}
	if profiles != "" {
		if err := benchkit.SaveProfile(ctx, b.pprofURL+"/debug/pprof/allocs?gc=1", filepath.Join(profiles, b.mode+"-acks-after.allocs.pprof")); err != nil {
			return 0, 0, 0, err
		}
	}
	if err := <-profiled; err != nil {
		return 0, 0, 0, err
	}
	return 2 * len(b.ids), took, cpu1 - cpu0, nil
}

// status times GetRolloutStatus of the ingest release.
func (b *bench) status(ctx context.Context) ([]time.Duration, int, error) {
	var out []time.Duration
	size := 0
	for range b.o.statusCalls {
		start := time.Now()
		resp, err := b.ro.GetRolloutStatus(ctx, connect.NewRequest(&pawlv1.GetRolloutStatusRequest{ConfigId: "ingest", Generation: b.ingested.GetGeneration()}))
		if err != nil {
			return nil, 0, err
		}
		out = append(out, time.Since(start))
		size = proto.Size(resp.Msg)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, size, nil
}

// heartbeat has every instance heartbeat every lease/3, spread evenly over
// the interval, until ctx ends.
func (b *bench) heartbeat(ctx context.Context) error {
	per := b.o.lease / 3 / time.Duration(len(b.ids))
	tick := time.NewTicker(max(per, time.Microsecond))
	defer tick.Stop()
	sem := make(chan struct{}, b.o.workers)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		id := b.ids[i%len(b.ids)]
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if _, err := b.is.Heartbeat(ctx, connect.NewRequest(&pawlv1.HeartbeatRequest{WorkloadIdentity: id, BootId: "boot-1"})); err != nil && ctx.Err() == nil {
				b.heartbeatsFailed.Add(1)
			}
		}()
	}
}

// idle measures pawld's CPU share while nothing happens but the streams
// being connected and every instance heartbeating.
func (b *bench) idle(context.Context) (float64, error) {
	cpu0, err := benchkit.CPU(b.srv.Pid())
	if err != nil {
		return 0, err
	}
	start := time.Now()
	time.Sleep(b.o.idle)
	took := time.Since(start)
	cpu1, err := benchkit.CPU(b.srv.Pid())
	if err != nil {
		return 0, err
	}
	if n := b.heartbeatsFailed.Load(); n > 0 {
		return 0, fmt.Errorf("%d heartbeats failed", n)
	}
	return (cpu1 - cpu0).Seconds() / took.Seconds(), nil
}

// marker is the key whose revisions bracket the ACKs.
const marker = "/bench/marker"

func putMarker(ctx context.Context, kv pawlv1connect.KVServiceClient) (int64, error) {
	resp, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: marker, Value: []byte("x")}))
	if err != nil {
		return 0, fmt.Errorf("put %s: %w", marker, err)
	}
	return resp.Msg.GetRevision(), nil
}

// resumable reports how many revisions followed the marker put at mark,
// and whether the change log still holds mark a few seconds later (the
// compactor runs on its own as the log grows): what a watcher of the key
// space that was at mark before the ACKs would find.
func resumable(ctx context.Context, kv pawlv1connect.KVServiceClient, mark int64) (int64, string, error) {
	now, err := putMarker(ctx, kv)
	if err != nil {
		return 0, "", err
	}
	start := time.Now()
	for time.Since(start) < 5*time.Second {
		_, err := kv.Get(ctx, connect.NewRequest(&pawlv1.GetRequest{Key: marker, Revision: mark}))
		if connect.CodeOf(err) == connect.CodeFailedPrecondition {
			return now - mark - 1, fmt.Sprintf("no: compacted (%v)", err), nil
		}
		if err != nil {
			return 0, "", fmt.Errorf("get %s at %d: %w", marker, mark, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return now - mark - 1, "yes (5 s after the last ACK)", nil
}
