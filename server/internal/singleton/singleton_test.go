package singleton

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/pawlcfg/pawl/internal/testkit/faultproxy"
	"github.com/pawlcfg/pawl/internal/testkit/redistest"
	"github.com/pawlcfg/pawl/server/internal/store"
	"github.com/pawlcfg/pawl/server/internal/store/boltstore"
	"github.com/pawlcfg/pawl/server/internal/store/redisstore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).reaper"))
}

// runner runs Run in the background and records when its work runs.
type runner struct {
	running atomic.Bool
	started chan store.Fence
	stop    context.CancelFunc
	done    chan struct{}
}

func start(t *testing.T, st store.Store, holder string, ttl time.Duration) *runner {
	ctx, cancel := context.WithCancel(context.Background())
	r := &runner{started: make(chan store.Fence, 8), stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		Run(ctx, st, "work", holder, ttl, slog.New(slog.DiscardHandler), func(ctx context.Context) {
			f, _ := store.FenceFrom(ctx)
			r.running.Store(true)
			r.started <- f
			<-ctx.Done()
			r.running.Store(false)
		})
	}()
	t.Cleanup(func() { cancel(); <-r.done })
	return r
}

func TestOneHolderAndTakeOver(t *testing.T) {
	rdb, prefix := redistest.Shared(t)
	proxy := faultproxy.NewHolder(t, redistest.Addr())
	cut := redis.NewClient(&redis.Options{Addr: proxy.Addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond, ReadTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = cut.Close() })
	a, err := redisstore.Open(context.Background(), cut, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	b, err := redisstore.Open(context.Background(), rdb, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	const ttl = 900 * time.Millisecond

	ra := start(t, a, "a", ttl)
	fa := <-ra.started
	rb := start(t, b, "b", ttl)
	select {
	case <-rb.started:
		t.Fatal("b runs the work while a holds the lease")
	case <-time.After(2 * ttl):
	}
	if _, err := a.Put(store.WithFence(context.Background(), fa), store.Put{Key: "/by", Value: []byte("a")}); err != nil {
		t.Fatalf("a's fenced write while it holds the lease: %v", err)
	}

	// a is cut off from Redis: it cannot renew, stops its work before
	// its lease may have expired, and b takes over.
	proxy.Partition()
	cutAt := time.Now()
	fb := <-rb.started
	if ra.running.Load() {
		t.Fatalf("a still runs its work when b took over (%s after the cut)", time.Since(cutAt))
	}
	if fb.Token <= fa.Token {
		t.Fatalf("b's token %d is not above a's %d", fb.Token, fa.Token)
	}
	proxy.Heal()
	if _, err := a.Put(store.WithFence(context.Background(), fa), store.Put{Key: "/by", Value: []byte("late")}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("a's fenced write after b took over = %v, want ErrFenced", err)
	}

	// b stops cleanly: it releases the lease, and a takes it at once
	// (well before the lease would have expired).
	rb.stop()
	<-rb.done
	select {
	case f := <-ra.started:
		if f.Token <= fb.Token {
			t.Fatalf("a's new token %d is not above b's %d", f.Token, fb.Token)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a never took the lease back")
	}
}

func TestWithoutLeasesWorkJustRuns(t *testing.T) {
	st, err := boltstore.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		Run(ctx, st, "work", "only", time.Second, slog.New(slog.DiscardHandler), func(ctx context.Context) {
			if _, ok := store.FenceFrom(ctx); ok {
				t.Error("a store without leases got a fence")
			}
			close(ran)
			<-ctx.Done()
		})
	}()
	<-ran
	cancel()
	wg.Wait()
}
