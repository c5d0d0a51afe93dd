package boltstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pawlcfg/pawl/server/internal/store"
)

// BenchmarkPut measures durable puts straight into the engine, from one and
// from 16 concurrent writers, and reports how many writes one commit carried.
func BenchmarkPut(b *testing.B) {
	value := make([]byte, 256)
	for _, writers := range []int{1, 16} {
		b.Run(fmt.Sprintf("writers-%d", writers), func(b *testing.B) {
			s, err := Open(context.Background(), b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var commits atomic.Int64
			s.Subscribe(func([]store.Event) { commits.Add(1) })
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
						if _, err := s.Put(context.Background(), store.Put{Key: fmt.Sprintf("/bench/%d", w), Value: value}); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "puts/s")
			b.ReportMetric(float64(b.N)/float64(commits.Load()), "puts/commit")
		})
	}
}
