package main_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
)

// BenchmarkIdleWatchMemory measures the resident memory a real pawld
// process gains per idle watch stream: it opens 5,000 streams (100 per
// HTTP/2 connection, after a warm-up of 100) and divides the growth of
// VmRSS by their number. RSS counts goroutine stacks, HTTP/2 stream state
// and the hub's watcher, and also heap the runtime has not returned yet, so
// the figure is an upper bound.
func BenchmarkIdleWatchMemory(b *testing.B) {
	const warmup, streams, perConn = 100, 5000, 100
	for b.Loop() {
		p := startPawld(b, b.TempDir())
		clients := make([]pawlv1connect.KVServiceClient, (warmup+streams)/perConn+1)
		for i := range clients {
			clients[i] = p.client(b)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var open []*connect.ServerStreamForClient[pawlv1.WatchResponse]
		watch := func(i int) {
			s, err := clients[i/perConn].Watch(ctx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: fmt.Sprintf("/idle/%d/", i)}))
			if err != nil {
				b.Fatal(err)
			}
			if !s.Receive() {
				b.Fatal(s.Err())
			}
			open = append(open, s)
		}
		for i := range warmup {
			watch(i)
		}
		before := rssBytes(b, p.cmd.Process.Pid)
		for i := range streams {
			watch(warmup + i)
		}
		after := rssBytes(b, p.cmd.Process.Pid)
		b.ReportMetric(float64(after-before)/streams/1024, "KiB/watcher")
		b.ReportMetric(float64(after)/(1<<20), "MiB-rss")
		cancel()
		for _, s := range open {
			_ = s.Close()
		}
		p.stop(b)
	}
}

func rssBytes(b *testing.B, pid int) int64 {
	b.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatal("no VmRSS")
	return 0
}
