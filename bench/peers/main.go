// Command peers measures Pawl side by side with its peers, in one run on
// one machine, with the same client load: etcd (Debian's etcd-server),
// Redis (pub/sub for fan-out, SET for puts) and NATS (core pub/sub),
// each started here as a private process on free ports, and pawld on its
// embedded store. Values are 1 KiB. It prints one Markdown table:
//
//	go run . -watchers 1000,10000 -rate 20 -duration 10s
//
// (from bench/peers, a module of its own so that the peers' clients stay
// out of Pawl's dependencies). Rows:
//
//   - durable puts/s with 1 and with 16 writers, for 5 s each (Redis with
//     appendonly yes and appendfsync always; NATS core has no store);
//   - fan-out: N watchers (subscribers) on 64 connections (Redis: one
//     connection each, as a Redis subscription is per connection), one
//     writer asking for -rate writes/s, each write waited for (as a
//     deploy tool does), in a process of its own (this program again,
//     with -write-to; -writer inline puts it in the watchers' process,
//     where its answers wait behind the watchers' goroutines for the
//     CPU; -writers N runs N such processes, each asking for -rate
//     writes/s): writes that got through per second, put p50, and
//     the time from sending a write to its last watcher receiving it (p50,
//     p99);
//   - for pawld, the fan-out's put p50 as pawld itself timed it, and its
//     store commit's p50 (from the histograms on its /metrics, so only as
//     fine as their buckets): what the client's put p50 has beyond them
//     is the wire and the two processes waiting for the CPU;
//   - the server's resident memory per watcher: the growth of its VmRSS
//     from before the fan-out's watchers subscribed to after, divided by
//     their number (an upper bound for Go servers: it counts heap not yet
//     collected);
//   - catch-up: a watcher that starts at the first of 10,000 earlier
//     writes, until it has them all (Pawl and etcd keep history).
//
// Pawl's fan-out is measured three ways with -systems pawl,pawl-session,pawl-shared:
// "pawl" opens each watcher as a KVService.Watch stream of its own,
// "pawl-session" opens them on 64 SessionService sessions (one per
// connection), each watch with its ID; "pawl-shared" likewise, with the
// sessions asking for shared events (a change once per session, with the
// IDs of the watches it is for, as the SDK asks).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pawlcfg/pawl/bench/internal/benchkit"
)

// system is one product under test.
type system interface {
	name() string
	// put writes one value durably (as durable as the system gets).
	put(ctx context.Context, key string, value []byte) error
	// subscribe opens n watchers of the prefix /fan/ and returns once all
	// are established; deliver is called with the index of every write a
	// watcher receives (the key's or subject's suffix).
	subscribe(ctx context.Context, n int, deliver func(i int)) error
	// catchUp reads the writes from the first of count earlier ones under
	// /cu/, from history, and returns when it has them all (false when
	// the system keeps no history).
	catchUp(ctx context.Context, count int) (bool, error)
	// server is the system's server process.
	server() *proc
	close()
}

type options struct {
	watchers          []int
	rate              int
	duration, putsFor time.Duration
	only, profiles    string
	inlineWriter      bool
	writers           int // writer processes in the fan-out rows
}

func main() {
	var o options
	var watchers string
	flag.StringVar(&watchers, "watchers", "1000,10000", "watcher counts of the fan-out rows")
	flag.IntVar(&o.rate, "rate", 20, "writes per second the writer asks for in fan-out")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "how long each fan-out row writes")
	flag.DurationVar(&o.putsFor, "puts-for", 5*time.Second, "how long each put row writes")
	flag.StringVar(&o.only, "systems", "pawl,etcd,redis,nats", "systems to measure, in order")
	flag.StringVar(&o.profiles, "profiles", "", "write pawld's CPU profile of each fan-out row's writes to this directory")
	flag.StringVar(&pawldBin, "pawld", "", "pawld binary (default: built from Pawl's module, two directories up)")
	writer := flag.String("writer", "process", "where the fan-out's writer runs: process (one of its own) or inline (the watchers' process)")
	writeTo := flag.String("write-to", "", "be the fan-out's writer process for this kind of system (pawl, etcd, redis, nats)")
	writeAddr := flag.String("write-addr", "", "the address the writer process puts to")
	writeFirst := flag.Int("write-first", 0, "the index of the writer process's first key")
	writeCount := flag.Int("write-count", 0, "how many keys the writer process may write (0: as many as -rate and -duration allow)")
	flag.IntVar(&o.writers, "writers", 1, "writer processes in each fan-out row, each asking for -rate writes/s")
	flag.Parse()
	if *writeTo != "" {
		if err := writeMain(context.Background(), *writeTo, *writeAddr, *writeFirst, *writeCount, o.rate, o.duration); err != nil {
			fmt.Fprintln(os.Stderr, "peers: writer:", err)
			os.Exit(1)
		}
		return
	}
	switch *writer {
	case "process":
	case "inline":
		o.inlineWriter = true
		if o.writers != 1 {
			fmt.Fprintln(os.Stderr, "peers: -writer inline has one writer: -writers must be 1")
			os.Exit(2)
		}
	default:
		fmt.Fprintf(os.Stderr, "peers: -writer: %q is neither process nor inline\n", *writer)
		os.Exit(2)
	}
	for _, w := range strings.Split(watchers, ",") {
		n, err := strconv.Atoi(w)
		if err != nil {
			fmt.Fprintln(os.Stderr, "peers: -watchers:", err)
			os.Exit(2)
		}
		o.watchers = append(o.watchers, n)
	}
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

var starters = map[string]func(ctx context.Context, dir string) (system, error){
	"pawl": startPawl, "pawl-session": startPawlSessions(false), "pawl-shared": startPawlSessions(true), "etcd": startEtcd, "redis": startRedis, "nats": startNATS,
}

func run(ctx context.Context, o options) error {
	dir, err := os.MkdirTemp("", "peers")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	table := map[string]map[string]string{}
	var names, rows []string
	addRow := func(row string) {
		for _, r := range rows {
			if r == row {
				return
			}
		}
		rows = append(rows, row)
	}
	for _, key := range strings.Split(o.only, ",") {
		start, ok := starters[key]
		if !ok {
			return fmt.Errorf("-systems: unknown %q", key)
		}
		// Each row gets a fresh process, so that one row's leftovers
		// (watchers, data) do not weigh on the next.
		fresh := func(f func(s system) error) error {
			s, err := start(ctx, filepath.Join(dir, fmt.Sprintf("%s-%d", key, time.Now().UnixNano())))
			if err != nil {
				return err
			}
			defer s.close()
			return f(s)
		}
		var name string
		set := func(row, v string) {
			addRow(row)
			if table[row] == nil {
				table[row] = map[string]string{}
			}
			table[row][name] = v
			fmt.Fprintf(os.Stderr, "%s: %s: %s\n", name, row, v)
		}
		err := fresh(func(s system) error {
			name = s.name()
			names = append(names, name)
			for _, writers := range []int{1, 16} {
				n, err := puts(ctx, s, writers, o.putsFor)
				if err != nil {
					set(fmt.Sprintf("durable puts/s, %d writer(s)", writers), "— ("+err.Error()+")")
					continue
				}
				set(fmt.Sprintf("durable puts/s, %d writer(s)", writers), fmt.Sprintf("%.0f", n))
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		for _, w := range o.watchers {
			if err := fresh(func(s system) error {
				profile := ""
				if o.profiles != "" {
					profile = filepath.Join(o.profiles, fmt.Sprintf("%s-%d.cpu.pprof", key, w))
				}
				r, err := fanOut(ctx, s, w, o, profile)
				if err != nil {
					return err
				}
				where := "a writer process of its own"
				if o.inlineWriter {
					where = "the writer in the watchers' process"
				}
				if o.writers > 1 {
					where = fmt.Sprintf("%d writer processes of their own", o.writers)
				}
				set(fmt.Sprintf("%d watchers, %d writes/s asked (%s): writes/s through, put p50", w, o.rate*o.writers, where), fmt.Sprintf("%.1f, %s", r.rate, ms(r.putP50)))
				set(fmt.Sprintf("%d watchers: all-received p50, p99 (missing)", w), fmt.Sprintf("%s, %s (%d)", ms(r.p50), ms(r.p99), r.missing))
				set(fmt.Sprintf("%d watchers: server resident memory per watcher", w), fmt.Sprintf("%.2f KiB", r.perWatcher/1024))
				if r.server != "" {
					set(fmt.Sprintf("%d watchers: the put's p50 in the server, of which the store's commit", w), r.server)
				}
				return nil
			}); err != nil {
				return fmt.Errorf("%s, %d watchers: %w", key, w, err)
			}
		}
		if err := fresh(func(s system) error {
			const count = 10000
			value := make([]byte, 1024)
			for i := range count {
				if err := s.put(ctx, fmt.Sprintf("/cu/%06d", i), value); err != nil {
					return err
				}
			}
			start := time.Now()
			ok, err := s.catchUp(ctx, count)
			if err != nil {
				return err
			}
			if !ok {
				set("catch-up of 10,000 missed events", "no history")
				return nil
			}
			set("catch-up of 10,000 missed events", ms(time.Since(start)))
			return nil
		}); err != nil {
			return fmt.Errorf("%s, catch-up: %w", key, err)
		}
	}
	fmt.Printf("\n%d CPUs (%s/%s), %s, 1 KiB values\n\n", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, time.Now().UTC().Format("2006-01-02"))
	fmt.Printf("| measure | %s |\n|---|%s\n", strings.Join(names, " | "), strings.Repeat("---|", len(names)))
	for _, row := range rows {
		cells := make([]string, len(names))
		for i, n := range names {
			cells[i] = table[row][n]
		}
		fmt.Printf("| %s | %s |\n", row, strings.Join(cells, " | "))
	}
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// puts runs writers putting 1 KiB values as fast as they can for d.
func puts(ctx context.Context, s system, writers int, d time.Duration) (float64, error) {
	var n atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	end := time.Now().Add(d)
	start := time.Now()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			value := make([]byte, 1024)
			for i := 0; time.Now().Before(end); i++ {
				if err := s.put(ctx, fmt.Sprintf("/puts/%d/%d", w, i%100), value); err != nil {
					errs <- err
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return float64(n.Load()) / time.Since(start).Seconds(), nil
}

type fanResult struct {
	perWatcher float64 // bytes of the server's RSS
	rate       float64
	putP50     time.Duration
	p50, p99   time.Duration
	missing    int
	server     string // the put's p50 as the server timed it, and its commit's
}

// serverTimes is what a server's own histograms held at one moment.
type serverTimes struct {
	put, commit benchkit.Histogram
}

// serverTimer is a system whose server times its puts (pawld's /metrics):
// the fan-out row then says how much of a put's time the server took.
type serverTimer interface {
	serverTimes(ctx context.Context) (serverTimes, error)
}

// profiler is a system whose server can profile itself (pawld --pprof).
type profiler interface {
	// cpuProfile writes a CPU profile of the server over d to file.
	cpuProfile(ctx context.Context, d time.Duration, file string) error
}

// fanOut subscribes n watchers and writes at the rate for d, each write
// waited for; with profile set, and a system that can, it profiles the
// server over the writes into that file.
func fanOut(ctx context.Context, s system, n int, o options, profile string) (fanResult, error) {
	rate, d := o.rate, o.duration
	perWriter := int(d.Seconds() * float64(rate))
	total := perWriter * o.writers // writer k writes k*perWriter and on
	sent := make([]atomic.Int64, total)
	last := make([]atomic.Int64, total)
	count := make([]atomic.Int32, total)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rss0, err := benchkit.RSS(s.server().pid())
	if err != nil {
		return fanResult{}, err
	}
	if err := s.subscribe(wctx, n, func(i int) {
		if i < 0 || i >= total {
			return
		}
		now := time.Now().UnixNano()
		count[i].Add(1)
		for {
			cur := last[i].Load()
			if now <= cur || last[i].CompareAndSwap(cur, now) {
				return
			}
		}
	}); err != nil {
		return fanResult{}, err
	}
	rss1, err := benchkit.RSS(s.server().pid())
	if err != nil {
		return fanResult{}, err
	}
	var putTimes []time.Duration
	profiled := make(chan error, 1)
	if p, ok := s.(profiler); ok && profile != "" {
		go func() { profiled <- p.cpuProfile(ctx, d, profile) }()
	} else {
		profiled <- nil
	}
	timer, timed := s.(serverTimer)
	var before serverTimes
	if timed {
		if before, err = timer.serverTimes(ctx); err != nil {
			return fanResult{}, err
		}
	}
	written := 0
	var elapsed time.Duration
	if w, ok := s.(writable); ok && !o.inlineWriter {
		var mu sync.Mutex
		errs := make([]error, o.writers)
		var wg sync.WaitGroup
		for k := range o.writers {
			wg.Go(func() {
				took, err := runWriter(ctx, w, k*perWriter, perWriter, rate, d, func(i int, at int64, took time.Duration) {
					if i >= 0 && i < total {
						sent[i].Store(at)
						mu.Lock()
						putTimes = append(putTimes, took)
						written++
						mu.Unlock()
					}
				})
				mu.Lock()
				elapsed = max(elapsed, took)
				mu.Unlock()
				errs[k] = err
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return fanResult{}, err
		}
	} else if elapsed, err = writeFan(ctx, s, 0, total, rate, d, func(i int, at time.Time, took time.Duration) {
		sent[i].Store(at.UnixNano())
		putTimes = append(putTimes, took)
		written++
	}); err != nil {
		return fanResult{}, err
	}
	var r fanResult
	if timed {
		after, err := timer.serverTimes(ctx)
		if err != nil {
			return fanResult{}, err
		}
		put, err := after.put.Since(before.put)
		if err != nil {
			return fanResult{}, err
		}
		commit, err := after.commit.Since(before.commit)
		if err != nil {
			return fanResult{}, err
		}
		r.server = fmt.Sprintf("%s, %s (%d puts)", ms(put.Quantile(0.5)), ms(commit.Quantile(0.5)), put.Count())
	}
	if err := <-profiled; err != nil {
		return fanResult{}, err
	}
	// Wait for the deliveries to settle: every write at every watcher, or
	// nothing new for 5 s.
	for quiet, seen := time.Now(), int64(-1); time.Since(quiet) < 5*time.Second; time.Sleep(50 * time.Millisecond) {
		var got int64
		for i := range total {
			if sent[i].Load() != 0 {
				got += int64(count[i].Load())
			}
		}
		if got == int64(written*n) {
			break
		}
		if got != seen {
			quiet, seen = time.Now(), got
		}
	}
	r.perWatcher = float64(rss1-rss0) / float64(n)
	r.rate = float64(written) / elapsed.Seconds()
	if len(putTimes) == 0 {
		return fanResult{}, errors.New("no write was made")
	}
	sort.Slice(putTimes, func(a, b int) bool { return putTimes[a] < putTimes[b] })
	r.putP50 = putTimes[len(putTimes)/2]
	var all []time.Duration
	for i := range total {
		if sent[i].Load() == 0 {
			continue // not written
		}
		r.missing += n - int(count[i].Load())
		if count[i].Load() > 0 {
			all = append(all, time.Duration(last[i].Load()-sent[i].Load()))
		}
	}
	sort.Slice(all, func(a, b int) bool { return all[a] < all[b] })
	if len(all) > 0 {
		r.p50, r.p99 = all[len(all)/2], all[min(len(all)-1, len(all)*99/100)]
	}
	return r, nil
}

// index reads the write index at the end of a key or subject.
func index(s string) int {
	i := strings.LastIndexAny(s, "/.")
	n, err := strconv.Atoi(s[i+1:])
	if err != nil {
		return -1
	}
	return n
}
