package audit_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/pawlcfg/pawl/server/internal/audit"
)

// BenchmarkFileAppend appends from 64 goroutines per CPU, as a busy
// server's calls do, with each record fsynced alone (batch 1) and with
// group commit (the default): the records/s metric is what one log
// sustains, and the gap between the two is why appends are batched.
func BenchmarkFileAppend(b *testing.B) {
	for _, tc := range []struct {
		name  string
		batch int
	}{{"batch=1", 1}, {"batch=default", audit.DefaultMaxBatch}} {
		b.Run(tc.name, func(b *testing.B) {
			l, err := audit.OpenFile(filepath.Join(b.TempDir(), audit.FileName), audit.WithMaxBatch(tc.batch))
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			r := record(1)
			b.ReportAllocs()
			b.SetParallelism(64)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := l.Append(context.Background(), r); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}
