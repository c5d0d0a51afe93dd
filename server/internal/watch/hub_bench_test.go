package watch_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pawlcfg/pawl/server/internal/store"
	"github.com/pawlcfg/pawl/server/internal/store/boltstore"
	"github.com/pawlcfg/pawl/server/internal/watch"
)

// BenchmarkHubFanOut measures the hub alone: from a committed put (fsync
// included) to every one of N watchers' Next having returned its event, with
// no network or encoding. Compare with BenchmarkPutToDelivery in server/,
// which adds gRPC streams over loopback.
func BenchmarkHubFanOut(b *testing.B) {
	for _, n := range []int{1, 100, 1000, 10000} {
		b.Run(fmt.Sprintf("watchers-%d", n), func(b *testing.B) {
			st, err := boltstore.Open(context.Background(), b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			hub, err := watch.New(context.Background(), st)
			if err != nil {
				b.Fatal(err)
			}
			defer hub.Close()
			ctx, cancel := context.WithCancel(context.Background())
			var received, target atomic.Int64
			allDone := make(chan struct{}, 1)
			var wg sync.WaitGroup
			for range n {
				w, err := hub.Watch(ctx, "/fleet/", 0)
				if err != nil {
					b.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer w.Close()
					for {
						batch, err := w.Next(ctx)
						if err != nil {
							return
						}
						for range batch.Events {
							if received.Add(1) == target.Load() {
								allDone <- struct{}{}
							}
						}
					}
				}()
			}
			value := make([]byte, 256)
			var latencies []time.Duration
			b.ReportAllocs()
			for b.Loop() {
				target.Add(int64(n))
				start := time.Now()
				if _, err := st.Put(context.Background(), store.Put{Key: "/fleet/config", Value: value}); err != nil {
					b.Fatal(err)
				}
				<-allDone
				latencies = append(latencies, time.Since(start))
			}
			b.StopTimer()
			cancel()
			wg.Wait()
			slices.Sort(latencies)
			b.ReportMetric(float64(latencies[len(latencies)/2])/1e6, "p50-ms")
			b.ReportMetric(float64(latencies[len(latencies)*99/100])/1e6, "p99-ms")
		})
	}
}
