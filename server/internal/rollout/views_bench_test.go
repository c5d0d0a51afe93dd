package rollout_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/pawlcfg/pawl/internal/testkit/wasmbuild"
	"github.com/pawlcfg/pawl/server/internal/instance"
	"github.com/pawlcfg/pawl/server/internal/quorum"
	"github.com/pawlcfg/pawl/server/internal/release"
	"github.com/pawlcfg/pawl/server/internal/rollout"
	"github.com/pawlcfg/pawl/server/internal/store"
	"github.com/pawlcfg/pawl/server/internal/store/boltstore"
	"github.com/pawlcfg/pawl/validators/host"
)

// BenchmarkViewsMemory measures what the rollout views keep in memory for
// a fleet: instances registered in four zones (with labels, or none), and
// configs each with a release whose frozen membership is every instance
// and whose plan is a canary then zone by zone. Each iteration starts
// views (with a release cache of their own) over the same store, waits
// until they hold every config, and reports the heap they added, per
// instance per config (views-B/instance/config), and in all (views-MiB).
// With -short the fleet is 1,000 instances and 10 configs; otherwise
// 10,000 and 100, the fleet of bench/fleet.
func BenchmarkViewsMemory(b *testing.B) {
	instances, configs := 10000, 100
	if testing.Short() {
		instances, configs = 1000, 10
	}
	for _, labels := range []int{0, 2} {
		b.Run(fmt.Sprintf("instances=%d,configs=%d,labels=%d", instances, configs, labels), func(b *testing.B) {
			benchViewsMemory(b, instances, configs, labels)
		})
	}
}

func benchViewsMemory(b *testing.B, instances, configs, labels int) {
	ctx := context.Background()
	st, err := boltstore.Open(ctx, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	registry, err := instance.New(ctx, st, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	register := func(i int) error {
		in := instance.Instance{WorkloadIdentity: fmt.Sprintf("svc-%05d", i), BootID: "boot-1", Zone: fmt.Sprintf("zone-%c", 'a'+i%4),
			Role: "worker", TrafficWeight: 1, AppVersion: "1.2.3"}
		if labels > 0 {
			in.Labels = map[string]string{"team": "payments", "tier": fmt.Sprintf("tier-%d", i%3)}
		}
		_, err := registry.Register(ctx, in)
		return err
	}
	if err := parallel(instances, 32, register); err != nil {
		b.Fatal(err)
	}
	v := wasmbuild.Load(b, "routing")
	validate := func(ctx context.Context, _ string, in host.Input) (host.Result, error) { return v.Validate(ctx, in) }
	releases := release.New(st, validate, registry.Members)
	for c := range configs {
		spec := release.Spec{
			ConfigID: fmt.Sprintf("cfg-%03d", c), MediaType: "application/json", ValidatorDigest: v.Info().Digest,
			Content: []byte(`{"upstreams":[{"host":"a","weight":50},{"host":"b","weight":50}]}`),
			Stages: []release.Stage{
				{Name: "canary", Policy: quorum.Policy{Kind: quorum.Fraction, Fraction: 0.01}},
				{Name: "zones", Policy: quorum.Policy{Kind: quorum.ZoneQuorum, Fraction: 0.9}},
			},
			Deadline: time.Hour,
		}
		if _, err := releases.Create(ctx, spec, "ci"); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	var added uint64
	for range b.N {
		added = viewsHeap(b, st, validate, registry)
	}
	b.ReportMetric(float64(added)/float64(instances*configs), "views-B/instance/config")
	b.ReportMetric(float64(added)/(1<<20), "views-MiB")
}

// viewsHeap starts views over st, waits until they hold every release,
// and returns the live heap they added.
func viewsHeap(b *testing.B, st store.Store, validate release.ValidateFunc, registry *instance.Registry) uint64 {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	before := liveHeap()
	r := rollout.New(st, release.New(st, validate, registry.Members), registry)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	if _, _, err := r.Assignments(ctx, "svc-00000"); err != nil {
		b.Fatal(err)
	}
	after := liveHeap()
	runtime.KeepAlive(r)
	cancel()
	if err := <-done; err != nil && ctx.Err() == nil {
		b.Fatal(err)
	}
	if after < before {
		return 0
	}
	return after - before
}

// liveHeap is the heap in use after two collections (the second empties
// what sync.Pools kept from before the first).
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// parallel calls fn for 0..n-1 from workers goroutines and returns the
// first error.
func parallel(n, workers int, fn func(i int) error) error {
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
		next  = make(chan int)
	)
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := fn(i); err != nil {
					once.Do(func() { first = err })
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}
