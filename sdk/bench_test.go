package sdk_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/pawlcfg/pawl/sdk"
)

// benchClient is a client that applied one release of "routing" from a
// real server.
func benchClient(b *testing.B) *sdk.Client {
	b.Helper()
	h := newHarness(b)
	c := h.client("bench")
	h.waitRegistered("bench")
	h.release(50, nil)
	has(b, c, 1)
	return c
}

// readers is how many goroutines read at once: 16, whatever GOMAXPROCS.
func readers(b *testing.B) {
	b.SetParallelism(max(1, 16/runtime.GOMAXPROCS(0)))
}

// BenchmarkConfig reads the current snapshot from 16 goroutines (aim: no
// allocation, over 10⁷ reads a second).
func BenchmarkConfig(b *testing.B) {
	c := benchClient(b)
	readers(b)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		var gen, n int64
		for pb.Next() {
			gen += c.Config("routing").Generation
			n++
		}
		if gen != n {
			b.Error("not generation 1")
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "reads/s")
}

// BenchmarkPinnedRead reads the pinned snapshot of a request from 16
// goroutines, each with its own request context (aim as above).
func BenchmarkPinnedRead(b *testing.B) {
	c := benchClient(b)
	readers(b)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		ctx := c.Pin(context.Background())
		var gen, n int64
		for pb.Next() {
			gen += sdk.Pinned(ctx, "routing").Generation
			n++
		}
		if gen != n {
			b.Error("not generation 1")
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "reads/s")
}

// BenchmarkPin pins every config at the start of a request.
func BenchmarkPin(b *testing.B) {
	c := benchClient(b)
	readers(b)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if sdk.Pinned(c.Pin(context.Background()), "routing") == nil {
				b.Error("nothing pinned")
			}
		}
	})
}

// BenchmarkJSON reads the typed value of a snapshot, decoded once.
func BenchmarkJSON(b *testing.B) {
	c := benchClient(b)
	readers(b)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if v, err := sdk.JSON[table](c.Config("routing")); err != nil || v == nil {
				b.Error(err)
			}
		}
	})
}
