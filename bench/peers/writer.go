package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
)

// A fan-out row's writer runs in a process of its own by default (this
// program again, with -write-to), as a deploy tool does: its put's
// answer then waits in no queue of the watchers' process, whose
// goroutines are busy with the same change on the same two cores.
// -writer inline keeps it in the watchers' process, as the rows measured
// before 2026-12-05 did.

// writable is a system a writer process can put to.
type writable interface {
	// writeTo is the kind and the address the writer process is given
	// (-write-to, -write-addr).
	writeTo() (kind, addr string)
}

// writers make, in the writer process, a system whose put alone works.
var writers = map[string]func(addr string) (system, error){
	"pawl": func(addr string) (system, error) {
		return &pawl{url: addr, clients: []pawlv1connect.KVServiceClient{pawlv1connect.NewKVServiceClient(h2c(), addr, connect.WithGRPC())}}, nil
	},
	"etcd": func(addr string) (system, error) {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second})
		return &etcd{clients: []*clientv3.Client{c}}, err
	},
	"redis": func(addr string) (system, error) {
		return &redisPeer{rdb: redis.NewClient(&redis.Options{Addr: addr}), publish: true}, nil
	},
	"nats": func(addr string) (system, error) {
		c, err := nats.Connect("nats://" + addr)
		return &natsPeer{pub: c}, err
	},
}

// writeMain is the writer process: it puts 1 KiB under /fan/ and the
// index first, first+1, ... (at most count of them, 0: no bound) at rate
// for d, each waited for, and prints a line per put (its index, when it
// was sent in Unix nanoseconds, and how long its answer took in
// nanoseconds), then "done" and how long it wrote.
func writeMain(ctx context.Context, kind, addr string, first, count, rate int, d time.Duration) error {
	mk, ok := writers[kind]
	if !ok {
		return fmt.Errorf("-write-to: unknown %q", kind)
	}
	s, err := mk(addr)
	if err != nil {
		return err
	}
	out := bufio.NewWriter(os.Stdout)
	wrote, err := writeFan(ctx, s, first, count, rate, d, func(i int, at time.Time, took time.Duration) {
		fmt.Fprintf(out, "%d %d %d\n", i, at.UnixNano(), took.Nanoseconds())
		_ = out.Flush() // a failed write shows as the parent's missing lines
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "done %d\n", wrote.Nanoseconds())
	return out.Flush()
}

// writeFan is the fan-out's writer, in whichever process it runs: it puts
// 1 KiB under /fan/ and the index first, first+1, ... (at most count of
// them, 0: no bound) at rate for d, each waited for, calls put with each
// one's index, start and time, and returns how long it wrote.
func writeFan(ctx context.Context, s system, first, count, rate int, d time.Duration, put func(i int, at time.Time, took time.Duration)) (time.Duration, error) {
	value := make([]byte, 1024)
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	total := int(d.Seconds() * float64(rate))
	if count > 0 {
		total = min(total, count)
	}
	begin := time.Now()
	for i := first; i < first+total && time.Since(begin) < d; i++ {
		<-tick.C
		t := time.Now()
		if err := s.put(ctx, fmt.Sprintf("/fan/%06d", i), value); err != nil {
			return 0, err
		}
		put(i, t, time.Since(t))
	}
	return time.Since(begin), nil
}

// runWriter runs a writer process for s, of count keys from first, and
// calls put for each put it reports; it returns how long the process
// wrote. The process is killed if runWriter returns early.
func runWriter(ctx context.Context, s writable, first, count, rate int, d time.Duration, put func(i int, sent int64, took time.Duration)) (time.Duration, error) {
	self, err := os.Executable()
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	kind, addr := s.writeTo()
	cmd := exec.CommandContext(ctx, self, "-write-to", kind, "-write-addr", addr, "-write-first", strconv.Itoa(first), "-write-count", strconv.Itoa(count),
		"-rate", strconv.Itoa(rate), "-duration", d.String())
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("writer process: %w", err)
	}
	waited := false
	defer func() {
		if !waited { // returned early: the deferred cancel kills it
			cancel()
			_ = cmd.Wait()
		}
	}()
	var wrote time.Duration
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		f := strings.Fields(lines.Text())
		if len(f) == 2 && f[0] == "done" {
			n, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("writer process: %q: %w", lines.Text(), err)
			}
			wrote = time.Duration(n)
			continue
		}
		if len(f) != 3 {
			return 0, fmt.Errorf("writer process: %q", lines.Text())
		}
		var n [3]int64
		for k := range n {
			if n[k], err = strconv.ParseInt(f[k], 10, 64); err != nil {
				return 0, fmt.Errorf("writer process: %q: %w", lines.Text(), err)
			}
		}
		put(int(n[0]), n[1], time.Duration(n[2]))
	}
	waited = true
	if err := errors.Join(lines.Err(), cmd.Wait()); err != nil {
		return 0, fmt.Errorf("writer process: %w", err)
	}
	if wrote == 0 {
		return 0, errors.New("writer process: it did not say it was done")
	}
	return wrote, nil
}
