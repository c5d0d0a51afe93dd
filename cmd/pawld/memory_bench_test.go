package main_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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

// procMemory reads a process's resident memory: anonymous (heap, stacks)
// and file-backed (the store's memory map), in bytes.
func procMemory(b *testing.B, pid int) (anon, file int64) {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		for name, dst := range map[string]*int64{"RssAnon:": &anon, "RssFile:": &file} {
			if rest, ok := strings.CutPrefix(line, name); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
				*dst = kb << 10
			}
		}
	}
	return anon, file
}

// BenchmarkListingMemory measures what listing a large tree costs a real
// pawld process: 16,000 keys of 7.5 KiB (120 MB), written in
// transactions, then listed in pages of up to 1,000 keys while a sampler
// reads the process's resident memory every 5 ms. It reports the peak
// growth of anonymous memory (heap and stacks: what serving the listing
// allocates) and of file-backed memory (the store's memory map, which the
// kernel can drop) over what the process held before the listing.
func BenchmarkListingMemory(b *testing.B) {
	const keys, valueBytes = 16000, 7680
	for b.Loop() {
		p := startPawld(b, b.TempDir())
		kv := p.client(b)
		ctx := context.Background()
		value := []byte(strings.Repeat("v", valueBytes))
		for start := 0; start < keys; start += 400 {
			req := &pawlv1.TxnRequest{}
			for i := start; i < start+400 && i < keys; i++ {
				req.Ops = append(req.Ops, &pawlv1.TxnOp{Key: fmt.Sprintf("/tree/%05d", i), Value: value})
			}
			if _, err := kv.Txn(ctx, connect.NewRequest(req)); err != nil {
				b.Fatal(err)
			}
		}
		anon0, file0 := procMemory(b, p.cmd.Process.Pid)
		var peakAnon, peakFile atomic.Int64
		stop := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			t := time.NewTicker(5 * time.Millisecond)
			defer t.Stop()
			for {
				anon, file := procMemory(b, p.cmd.Process.Pid)
				if anon > peakAnon.Load() {
					peakAnon.Store(anon)
				}
				if file > peakFile.Load() {
					peakFile.Store(file)
				}
				select {
				case <-stop:
					return
				case <-t.C:
				}
			}
		}()
		listed, pages := 0, 0
		for token := ""; ; {
			resp, err := kv.List(ctx, connect.NewRequest(&pawlv1.ListRequest{Prefix: "/tree/", PageSize: 1000, PageToken: token}))
			if err != nil {
				b.Fatal(err)
			}
			listed += len(resp.Msg.GetKvs())
			pages++
			if token = resp.Msg.GetNextPageToken(); token == "" {
				break
			}
		}
		close(stop)
		<-sampled
		if listed != keys {
			b.Fatalf("listed %d keys, want %d", listed, keys)
		}
		b.ReportMetric(float64(pages), "pages")
		b.ReportMetric(float64(peakAnon.Load()-anon0)/(1<<20), "MiB-anon-growth")
		b.ReportMetric(float64(peakFile.Load()-file0)/(1<<20), "MiB-file-growth")
		b.ReportMetric(float64(anon0+file0)/(1<<20), "MiB-rss-before")
		p.stop(b)
	}
}
