package rollout_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pawlcfg/pawl/server/internal/instance"
	"github.com/pawlcfg/pawl/server/internal/rollout"
	"github.com/pawlcfg/pawl/server/internal/store/boltstore"
)

// BenchmarkAckIngestion records ACKs from 1,000 instances at once (one
// goroutine each, every ACK a new apply sequence of its instance, so that
// each counts and writes its record, applied record and evidence) on
// bbolt: through the batches (RecordAck; batched-1024 with batches of up
// to 1,024 rather than DefaultAckBatch), and one transaction per ACK as
// before the batches (alone).
func BenchmarkAckIngestion(b *testing.B) {
	const instances = 1000
	for _, mode := range []string{"batched", "batched-1024", "alone"} {
		b.Run(mode, func(b *testing.B) {
			st, err := boltstore.Open(context.Background(), b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = st.Close() })
			var opts []rollout.Option
			if mode == "batched-1024" {
				opts = append(opts, rollout.WithAckBatching(1024, 4<<20, 0))
			}
			e := newEnvOn(b, st, st, 0, opts...)
			ctx := context.Background()
			var wg sync.WaitGroup
			sem := make(chan struct{}, 64)
			for i := range instances {
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					if _, err := e.registry.Register(ctx, instance.Instance{WorkloadIdentity: fmt.Sprintf("i%d", i), BootID: "boot-1",
						Zone: fmt.Sprintf("zone-%c", 'a'+i%3), Role: "worker", TrafficWeight: 1}); err != nil {
						b.Error(err)
					}
				})
			}
			wg.Wait()
			rel := e.release(b, 50)
			acks := make([]rollout.Ack, instances)
			for i := range acks {
				acks[i] = e.ackOf(b, rel, fmt.Sprintf("i%d", i), "boot-1", 0, rollout.Applied)
			}
			record := e.rollouts.RecordAck
			if mode == "alone" {
				record = e.rollouts.RecordAckAlone
			}
			var next atomic.Int64
			b.SetParallelism(max(instances/runtime.GOMAXPROCS(0), 1))
			b.ReportAllocs()
			b.ResetTimer()
			start, cpu := time.Now(), cpuTime(b)
			b.RunParallel(func(pb *testing.PB) {
				a := acks[int(next.Add(1)-1)%instances]
				for pb.Next() {
					a.ApplySequence++
					if got, err := record(ctx, a); err != nil || !got.Counted {
						b.Errorf("ACK = %+v, %v", got, err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "acks/s")
			// What the process spent per ACK (the store, the views, the
			// batches, the garbage collector): on a machine others share,
			// a steadier measure than the rate.
			b.ReportMetric(float64((cpuTime(b)-cpu).Microseconds())/float64(b.N), "cpu-µs/ack")
		})
	}
}

// cpuTime is the CPU time (user and system) the process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
