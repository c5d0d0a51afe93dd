// Command scaleout measures pawld on its three store setups side by side,
// in one run on one machine: the embedded store (one pawld), Redis with
// one pawld, and Redis with three pawld replicas. For each it measures
//
//   - put throughput with 1 and with 16 writers (no watchers), the writers
//     spread over the replicas;
//   - put-to-delivered latency with 10,000 watchers spread over the
//     replicas while writes come at a steady rate (20 per second): for
//     each write, the time from sending the put to the last watcher
//     receiving it (p50, p99, max), and over every single delivery (p50,
//     p99).
//
// It starts its own redis-server (appendonly yes, appendfsync always: the
// setting that loses nothing acknowledged, as the embedded store fsyncs
// every commit) on a free port in a temporary directory, and pawld as
// separate processes; the watchers and writers run in this process.
//
//	go run ./bench/scaleout -watchers 10000 -rate 20 -duration 15s
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/pawlcfg/pawl/bench/internal/benchkit"
	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
)

type options struct {
	pprofAddrs              []string
	profileName             string
	watchers, rate, perConn int
	duration, throughputFor time.Duration
	pawld, setups, profiles string
	replicaProcs            int
	http1                   bool
}

func main() {
	var o options
	flag.IntVar(&o.watchers, "watchers", 10000, "watch streams, spread over the replicas")
	flag.IntVar(&o.rate, "rate", 20, "writes per second while the watchers are attached")
	flag.DurationVar(&o.duration, "duration", 15*time.Second, "how long writes come at -rate")
	flag.DurationVar(&o.throughputFor, "throughput-for", 5*time.Second, "how long each throughput run lasts")
	flag.IntVar(&o.perConn, "streams-per-connection", 500, "watch streams per HTTP/2 connection")
	flag.StringVar(&o.pawld, "pawld", "", "pawld binary (default: built from ./cmd/pawld)")
	flag.StringVar(&o.setups, "setups", "bolt,redis-1,redis-3", "setups to measure, in order")
	flag.BoolVar(&o.http1, "http1", false, "watch over the Connect protocol on HTTP/1.1, one connection per stream, instead of gRPC over shared HTTP/2 connections")
	flag.IntVar(&o.replicaProcs, "replica-procs", 0, "GOMAXPROCS of each pawld when there are several (0: Go's default, every CPU)")
	flag.StringVar(&o.profiles, "profiles", "", "write CPU profiles of every pawld and of this process over the steady-rate writes to this directory")
	flag.Parse()
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "scaleout:", err)
		os.Exit(1)
	}
}

// setup is one way of running pawld.
type setup struct {
	name     string
	replicas int
	redis    bool
}

// result is what one setup measured.
type result struct {
	put1, put16                   float64 // puts per second
	allP50, allP99, allMax        time.Duration
	eachP50, eachP99              time.Duration
	writes, lost, sent, delivered int
	achievedRate                  float64
}

func run(ctx context.Context, o options) error {
	dir, err := os.MkdirTemp("", "scaleout")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if o.pawld == "" {
		o.pawld = filepath.Join(dir, "pawld")
		build := exec.CommandContext(ctx, "go", "build", "-o", o.pawld, "./cmd/pawld")
		build.Stderr = os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("build pawld: %w", err)
		}
	}
	all := map[string]setup{"bolt": {"embedded store, 1 pawld", 1, false}, "redis-1": {"Redis, 1 pawld", 1, true}, "redis-3": {"Redis, 3 pawld replicas", 3, true}}
	var names []string
	var results []result
	for i, key := range strings.Split(o.setups, ",") {
		s, ok := all[key]
		if !ok {
			return fmt.Errorf("-setups: unknown setup %q", key)
		}
		r, err := measure(ctx, o, s, filepath.Join(dir, strconv.Itoa(i)))
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		names = append(names, s.name)
		results = append(results, r)
	}
	fmt.Printf("\n%d watchers, %d writes/s for %s; %d CPUs (%s/%s), %s\n\n", o.watchers, o.rate, o.duration, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, time.Now().UTC().Format("2006-01-02"))
	fmt.Printf("| measure | %s |\n|---|%s\n", strings.Join(names, " | "), strings.Repeat("---|", len(names)))
	row := func(what string, f func(r result) string) {
		cells := make([]string, len(results))
		for i, r := range results {
			cells[i] = f(r)
		}
		fmt.Printf("| %s | %s |\n", what, strings.Join(cells, " | "))
	}
	row("puts/s, 1 writer", func(r result) string { return fmt.Sprintf("%.0f", r.put1) })
	row("puts/s, 16 writers", func(r result) string { return fmt.Sprintf("%.0f", r.put16) })
	row("writes at the steady rate (achieved/s)", func(r result) string { return fmt.Sprintf("%d (%.1f/s)", r.writes, r.achievedRate) })
	row("put to all watchers, p50", func(r result) string { return ms(r.allP50) })
	row("put to all watchers, p99", func(r result) string { return ms(r.allP99) })
	row("put to all watchers, max", func(r result) string { return ms(r.allMax) })
	row("put to one watcher, p50", func(r result) string { return ms(r.eachP50) })
	row("put to one watcher, p99", func(r result) string { return ms(r.eachP99) })
	row("deliveries (missing)", func(r result) string { return fmt.Sprintf("%d (%d)", r.delivered, r.lost) })
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// measure starts the setup, measures it and stops it.
func measure(ctx context.Context, o options, s setup, dir string) (result, error) {
	var args []string
	if s.redis {
		stop, addr, err := startRedis(ctx, filepath.Join(dir, "redis"))
		if err != nil {
			return result{}, err
		}
		defer stop()
		args = []string{"--store", "redis://" + addr + "/0", "--redis-prefix", "bench"}
	}
	var urls, pprofs []string
	for i := range s.replicas {
		extra := args
		if o.profiles != "" {
			addr, err := freeAddr()
			if err != nil {
				return result{}, err
			}
			extra = append(slices.Clone(args), "--pprof", addr)
			pprofs = append(pprofs, addr)
		}
		if o.replicaProcs > 0 && s.replicas > 1 {
			// Replicas sharing one machine with GOMAXPROCS each at every
			// CPU fight over them; pawld inherits this environment.
			os.Setenv("GOMAXPROCS", strconv.Itoa(o.replicaProcs))
		}
		p, err := benchkit.StartPawld(ctx, o.pawld, filepath.Join(dir, fmt.Sprintf("pawld-%d", i)), extra...)
		os.Unsetenv("GOMAXPROCS")
		if err != nil {
			return result{}, err
		}
		defer p.Stop()
		urls = append(urls, p.URL)
	}
	o.pprofAddrs = pprofs
	o.profileName = strings.NewReplacer(" ", "-", ",", "").Replace(s.name)
	fmt.Fprintf(os.Stderr, "%s: %d pawld up\n", s.name, len(urls))
	var r result
	var err error
	if r.put1, err = throughput(ctx, urls, 1, o.throughputFor); err != nil {
		return r, err
	}
	if r.put16, err = throughput(ctx, urls, 16, o.throughputFor); err != nil {
		return r, err
	}
	fmt.Fprintf(os.Stderr, "%s: %.0f puts/s with 1 writer, %.0f with 16\n", s.name, r.put1, r.put16)
	if err := latency(ctx, o, urls, &r); err != nil {
		return r, err
	}
	fmt.Fprintf(os.Stderr, "%s: put to all %d watchers p50 %s p99 %s\n", s.name, o.watchers, ms(r.allP50), ms(r.allP99))
	return r, nil
}

// startRedis runs a private redis-server with fsync-always persistence.
func startRedis(ctx context.Context, dir string) (stop func(), addr string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	addr = ln.Addr().String()
	_ = ln.Close()
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--dir", dir, "--save", "",
		"--appendonly", "yes", "--appendfsync", "always", "--logfile", filepath.Join(dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("start redis-server: %w", err)
	}
	stop = func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err := net.Dial("tcp", addr); err == nil {
			_ = c.Close()
			return stop, addr, nil
		}
		if time.Now().After(deadline) {
			stop()
			return nil, "", errors.New("redis-server did not listen")
		}
		time.Sleep(20 * time.Millisecond) // a child process has no readiness event to await
	}
}

// h2c returns an HTTP/2 (prior knowledge) client with its own connection.
func h2c() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}

// throughput runs writers putting as fast as they can for d, spread over
// the replicas, and returns puts per second.
func throughput(ctx context.Context, urls []string, writers int, d time.Duration) (float64, error) {
	var done atomic.Int64
	var firstErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(d)
	for w := range writers {
		kv := pawlv1connect.NewKVServiceClient(h2c(), urls[w%len(urls)], connect.WithGRPC())
		wg.Add(1)
		go func() {
			defer wg.Done()
			value := make([]byte, 256)
			for i := 0; time.Now().Before(end); i++ {
				if _, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: fmt.Sprintf("/tp/%d/%d", w, i%100), Value: value})); err != nil {
					mu.Lock()
					firstErr = errors.Join(firstErr, err)
					mu.Unlock()
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	return float64(done.Load()) / time.Since(start).Seconds(), firstErr
}

// latency attaches the watchers, writes at the rate, and measures when
// each write reaches each watcher.
func latency(ctx context.Context, o options, urls []string, r *result) error {
	total := int(o.duration.Seconds() * float64(o.rate))
	sent := make([]atomic.Int64, total)     // unix nanos of the put's sending
	lastAt := make([]atomic.Int64, total)   // latest delivery, unix nanos
	count := make([]atomic.Int32, total)    // deliveries
	const buckets = 100_000                 // 0.1 ms each: up to 10 s
	hist := make([]atomic.Int64, buckets+1) // every delivery's latency
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var started sync.WaitGroup
	var wg sync.WaitGroup
	var clients []*http.Client
	defer func() {
		for _, c := range clients {
			c.CloseIdleConnections()
		}
	}()
	var kvs []pawlv1connect.KVServiceClient
	for i := 0; i < o.watchers; i++ {
		switch {
		case o.http1 && i == 0:
			var p http.Protocols
			p.SetHTTP1(true)
			c := &http.Client{Transport: &http.Transport{Protocols: &p, MaxIdleConnsPerHost: o.watchers}}
			clients = append(clients, c)
			for _, u := range urls {
				kvs = append(kvs, pawlv1connect.NewKVServiceClient(c, u))
			}
		case !o.http1 && i%o.perConn == 0:
			c := h2c()
			clients = append(clients, c)
			kvs = append(kvs, pawlv1connect.NewKVServiceClient(c, urls[(i/o.perConn)%len(urls)], connect.WithGRPC()))
		}
		kv := kvs[len(kvs)-1]
		if o.http1 {
			kv = kvs[i%len(kvs)]
		}
		started.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			stream, err := kv.Watch(wctx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: "/lat/"}))
			if err != nil {
				started.Done()
				return
			}
			defer stream.Close()
			first := true
			for stream.Receive() {
				if first {
					started.Done()
					first = false
				}
				now := time.Now().UnixNano()
				for _, ev := range stream.Msg().GetEvents().GetEvents() {
					i, err := strconv.Atoi(strings.TrimPrefix(ev.GetKv().GetKey(), "/lat/"))
					if err != nil || i >= total {
						continue
					}
					count[i].Add(1)
					for {
						cur := lastAt[i].Load()
						if now <= cur || lastAt[i].CompareAndSwap(cur, now) {
							break
						}
					}
					b := min(int((now-sent[i].Load())/100_000), buckets)
					hist[b].Add(1)
				}
			}
			if first {
				started.Done()
			}
		}()
	}
	started.Wait()
	fmt.Fprintf(os.Stderr, "%d watchers started\n", o.watchers)
	writers := make([]pawlv1connect.KVServiceClient, len(urls))
	for i, u := range urls {
		writers[i] = pawlv1connect.NewKVServiceClient(h2c(), u, connect.WithGRPC())
	}
	stopProfiles := startProfiles(o)
	defer stopProfiles()
	value := make([]byte, 256)
	tick := time.NewTicker(time.Second / time.Duration(o.rate))
	begin := time.Now()
	var puts sync.WaitGroup
	var putErr error
	var mu sync.Mutex
	for i := range total {
		<-tick.C
		sent[i].Store(time.Now().UnixNano())
		puts.Add(1)
		go func() { // a slow put must not hold the rate back
			defer puts.Done()
			if _, err := writers[i%len(writers)].Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: fmt.Sprintf("/lat/%06d", i), Value: value})); err != nil {
				mu.Lock()
				putErr = errors.Join(putErr, err)
				mu.Unlock()
			}
		}()
	}
	tick.Stop()
	puts.Wait()
	r.achievedRate = float64(total) / time.Since(begin).Seconds()
	if putErr != nil {
		return putErr
	}
	// Wait for the deliveries to settle (every write reached every
	// watcher, or nothing moved for 5 s).
	want := int32(o.watchers)
	for quiet, last := time.Now(), -1; time.Since(quiet) < 5*time.Second; time.Sleep(50 * time.Millisecond) {
		n := 0
		for i := range count {
			if count[i].Load() == want {
				n++
			}
		}
		if n == total {
			break
		}
		if n != last {
			quiet, last = time.Now(), n
		}
	}
	cancel()
	wg.Wait()
	var all []time.Duration
	for i := range total {
		r.delivered += int(count[i].Load())
		r.lost += o.watchers - int(count[i].Load())
		all = append(all, time.Duration(lastAt[i].Load()-sent[i].Load()))
	}
	slices.Sort(all)
	r.writes = total
	r.allP50, r.allP99, r.allMax = benchkit.Percentile(all, 0.5), benchkit.Percentile(all, 0.99), all[len(all)-1]
	var n int64
	for i := range hist {
		n += hist[i].Load()
	}
	var acc int64
	for i := range hist {
		acc += hist[i].Load()
		d := time.Duration(i) * 100 * time.Microsecond
		if r.eachP50 == 0 && acc*2 >= n {
			r.eachP50 = d
		}
		if acc*100 >= n*99 {
			r.eachP99 = d
			break
		}
	}
	return nil
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// startProfiles profiles every pawld (over its --pprof address) and this
// process for the steady-rate writes, when -profiles is set; the returned
// function waits for the profiles.
func startProfiles(o options) func() {
	if o.profiles == "" {
		return func() {}
	}
	_ = os.MkdirAll(o.profiles, 0o755)
	secs := int(o.duration.Seconds())
	var wg sync.WaitGroup
	for i, addr := range o.pprofAddrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs))
			if err != nil {
				fmt.Fprintln(os.Stderr, "profile:", err)
				return
			}
			defer resp.Body.Close()
			f, err := os.Create(filepath.Join(o.profiles, fmt.Sprintf("%s-pawld-%d.pprof", o.profileName, i)))
			if err != nil {
				return
			}
			defer f.Close()
			_, _ = io.Copy(f, resp.Body)
		}()
	}
	f, err := os.Create(filepath.Join(o.profiles, o.profileName+"-bench.pprof"))
	if err == nil && pprof.StartCPUProfile(f) == nil {
		time.AfterFunc(o.duration, pprof.StopCPUProfile)
	}
	return func() {
		wg.Wait()
		if f != nil {
			_ = f.Close()
		}
	}
}
