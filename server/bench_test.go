package server_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
)

// BenchmarkPut measures acknowledged (fsynced) puts over gRPC on loopback,
// from one writer and from 16 concurrent writers.
func BenchmarkPut(b *testing.B) {
	value := make([]byte, 256)
	for _, writers := range []int{1, 16} {
		b.Run(fmt.Sprintf("writers-%d", writers), func(b *testing.B) {
			srv := testserver.Start(b)
			kv, _ := clientFor(b, srv)
			b.ReportAllocs()
			var next atomic.Int64
			start := time.Now()
			b.ResetTimer()
			var wg sync.WaitGroup
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						if _, err := kv.Put(context.Background(), connect.NewRequest(&pawlv1.PutRequest{Key: fmt.Sprintf("/bench/%d", w), Value: value})); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "puts/s")
		})
	}
}

// BenchmarkPutToDelivery measures, for each put, the time from sending it to
// every one of N watch streams on the prefix having received its event. The
// watchers read in this process, over real HTTP/2 connections, so the
// figure includes client-side work too. Streams are spread 100 to a
// connection: in a fleet each instance has its own connection, and Go's
// HTTP/2 write scheduler scans every stream of a connection per frame, so
// thousands of streams on one connection measure that scan, not Pawl.
func BenchmarkPutToDelivery(b *testing.B) {
	for _, n := range []int{1, 100, 1000, 10000} {
		b.Run(fmt.Sprintf("watchers-%d", n), func(b *testing.B) {
			srv := testserver.Start(b)
			watchers := countWatchers(b, srv, n, "/fleet/")
			writer, _ := clientFor(b, srv)
			value := make([]byte, 256)
			var latencies []time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				watchers.expect(int64(n))
				start := time.Now()
				if _, err := writer.Put(context.Background(), connect.NewRequest(&pawlv1.PutRequest{Key: "/fleet/config", Value: value})); err != nil {
					b.Fatal(err)
				}
				watchers.await(b)
				latencies = append(latencies, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(latencies)
			b.ReportMetric(ms(latencies[len(latencies)/2]), "p50-ms")
			b.ReportMetric(ms(latencies[(len(latencies)*99)/100]), "p99-ms")
		})
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// watcherCount is n watch streams that count the events they receive.
type watcherCount struct {
	received, target atomic.Int64
	allDone          chan struct{}
	expected         int64 // events expected since the last await
}

// countWatchers opens n watch streams on prefix, 100 to an HTTP/2
// connection (in a fleet each instance has its own connection), that
// count the events they receive; they end at cleanup, before the server
// stops.
func countWatchers(b *testing.B, srv *testserver.Server, n int, prefix string) *watcherCount {
	conns := (n + 99) / 100
	clients := make([]pawlv1connect.KVServiceClient, conns)
	for i := range clients {
		clients[i], _ = clientFor(b, srv)
	}
	c := &watcherCount{allDone: make(chan struct{}, 1)}
	var wg sync.WaitGroup
	streams := make([]*watchStream, 0, n)
	for i := range n {
		w := openWatchFor(b, clients[i%conns], prefix, 0, time.Hour) // as long as the benchmark runs
		streams = append(streams, w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w.Receive() {
				if k := int64(len(w.Msg().GetEvents().GetEvents())); k > 0 && c.received.Add(k) == c.target.Load() {
					c.allDone <- struct{}{}
				}
			}
		}()
	}
	b.Cleanup(func() {
		for _, w := range streams {
			w.close() // the readers then end
		}
		wg.Wait()
	})
	return c
}

// expect adds events, over all the streams, to what await waits for.
func (c *watcherCount) expect(events int64) {
	c.expected = events
	c.target.Add(events)
}

// await waits until every expected event arrived, failing after a minute.
func (c *watcherCount) await(b *testing.B) {
	select {
	case <-c.allDone:
	case <-time.After(time.Minute):
		b.Fatalf("the watchers got %d of %d events", c.received.Load()-c.target.Load()+c.expected, c.expected)
	}
}

// BenchmarkBatchToDelivery measures a deploy of 100 changed 1 KiB keys to
// 2,000 watchers of their prefix: from sending it to every watcher having
// received all 100 changes, as one transaction (KVService.Txn) and as 100
// single puts sent one after the other.
func BenchmarkBatchToDelivery(b *testing.B) {
	const watchers, keys = 2000, 100
	for _, how := range []string{"txn", "puts"} {
		b.Run(how, func(b *testing.B) {
			srv := testserver.Start(b)
			counted := countWatchers(b, srv, watchers, "/deploy/")
			writer, _ := clientFor(b, srv)
			value := make([]byte, 1024)
			var latencies []time.Duration
			b.ResetTimer()
			for b.Loop() {
				counted.expect(watchers * keys)
				start := time.Now()
				if how == "txn" {
					req := &pawlv1.TxnRequest{}
					for k := range keys {
						req.Ops = append(req.Ops, &pawlv1.TxnOp{Key: fmt.Sprintf("/deploy/k%03d", k), Value: value})
					}
					if _, err := writer.Txn(context.Background(), connect.NewRequest(req)); err != nil {
						b.Fatal(err)
					}
				} else {
					for k := range keys {
						if _, err := writer.Put(context.Background(), connect.NewRequest(&pawlv1.PutRequest{Key: fmt.Sprintf("/deploy/k%03d", k), Value: value})); err != nil {
							b.Fatal(err)
						}
					}
				}
				counted.await(b)
				latencies = append(latencies, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(latencies)
			b.ReportMetric(ms(latencies[len(latencies)/2]), "p50-ms")
			b.ReportMetric(ms(latencies[len(latencies)-1]), "max-ms")
		})
	}
}
