package redisstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/pawlcfg/pawl/internal/testkit/faultproxy"
	"github.com/pawlcfg/pawl/internal/testkit/redistest"
	"github.com/pawlcfg/pawl/server/internal/store"
	"github.com/pawlcfg/pawl/server/internal/store/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).reaper"))
}

func open(t *testing.T, rdb redis.UniversalClient, prefix string, opts ...Option) *Store {
	t.Helper()
	s, err := Open(context.Background(), rdb, prefix, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		rdb, prefix := redistest.Shared(t)
		return open(t, rdb, prefix)
	})
}

func TestConformanceShared(t *testing.T) {
	storetest.RunShared(t, func(t *testing.T) (store.Store, store.Store) {
		rdb, prefix := redistest.Shared(t)
		other := redis.NewClient(&redis.Options{Addr: redistest.Addr()})
		t.Cleanup(func() { _ = other.Close() })
		return open(t, rdb, prefix), open(t, other, prefix)
	})
}

// waitRevision waits until sub saw revision rev.
func waitRevision(t *testing.T, seen *atomic.Int64, rev int64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for seen.Load() < rev {
		if time.Now().After(deadline) {
			t.Fatalf("revision %d not delivered within %s (at %d)", rev, within, seen.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestLostNoticesAreRecoveredFromTheLog drops every pub/sub notice of the
// reading handle: the head check alone finds the writes, in order.
func TestLostNoticesAreRecoveredFromTheLog(t *testing.T) {
	rdb, prefix := redistest.Shared(t)
	var dropped atomic.Int64
	reader := open(t, rdb, prefix, WithHeadCheck(50*time.Millisecond), WithNoticeFilter(func(int64) bool {
		dropped.Add(1)
		return true
	}))
	other := redis.NewClient(&redis.Options{Addr: redistest.Addr()})
	t.Cleanup(func() { _ = other.Close() })
	writer := open(t, other, prefix)
	var last atomic.Int64
	var mu sync.Mutex
	var order []int64
	defer reader.Subscribe(func(evs []store.Event) {
		mu.Lock()
		defer mu.Unlock()
		for _, ev := range evs {
			order = append(order, ev.Revision())
			last.Store(ev.Revision())
		}
	})()
	for i := range 20 {
		if _, err := writer.Put(context.Background(), store.Put{Key: "/n", Value: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	waitRevision(t, &last, 20, 5*time.Second)
	if dropped.Load() == 0 {
		t.Fatal("no notice reached the filter: the test dropped nothing")
	}
	mu.Lock()
	defer mu.Unlock()
	for i, r := range order {
		if r != int64(i+1) {
			t.Fatalf("delivered %v, want 1..20 in order", order)
		}
	}
}

// TestSubscriptionCutAndRestored cuts the reading handle's connections to
// Redis (a partition in a proxy): the feed says it is stale, writes made
// meanwhile through another handle are delivered once the partition heals.
func TestSubscriptionCutAndRestored(t *testing.T) {
	rdb, prefix := redistest.Shared(t)
	proxy := faultproxy.NewHolder(t, redistest.Addr())
	cut := redis.NewClient(&redis.Options{Addr: proxy.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond})
	t.Cleanup(func() { _ = cut.Close() })
	reader := open(t, cut, prefix, WithHeadCheck(50*time.Millisecond))
	writer := open(t, rdb, prefix)
	staleCh := make(chan error, 16)
	defer reader.NotifyStale(func(err error) { staleCh <- err })()
	var last atomic.Int64
	defer reader.Subscribe(func(evs []store.Event) { last.Store(evs[len(evs)-1].Revision()) })()
	put := func(i int) int64 {
		res, err := writer.Put(context.Background(), store.Put{Key: "/cut", Value: []byte(fmt.Sprint(i))})
		if err != nil {
			t.Fatal(err)
		}
		return res.Revision
	}
	waitRevision(t, &last, put(0), 5*time.Second)

	proxy.Partition()
	select {
	case err := <-staleCh:
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("stale because %v, want ErrUnavailable", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the feed never said it was stale")
	}
	if reader.FeedError() == nil {
		t.Fatal("FeedError is nil while partitioned")
	}
	if _, err := reader.Put(context.Background(), store.Put{Key: "/cut", Value: []byte("x")}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("a write through the cut handle = %v, want ErrUnavailable", err)
	}
	var rev int64
	for i := 1; i <= 10; i++ {
		rev = put(i)
	}
	if got := last.Load(); got >= rev {
		t.Fatalf("delivered %d through a partition", got)
	}
	proxy.Heal()
	select {
	case err := <-staleCh:
		if err != nil {
			t.Fatalf("after healing, stale because %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the feed never said it was current again")
	}
	waitRevision(t, &last, rev, 5*time.Second)
	if _, err := reader.Put(context.Background(), store.Put{Key: "/cut", Value: []byte("y")}); err != nil {
		t.Fatalf("a write after healing: %v", err)
	}
}

// TestFeedSkipsWhatWasCompactedWhileCut: when the log was compacted past
// what a cut handle delivered, its next batch starts after the gap.
func TestFeedSkipsWhatWasCompactedWhileCut(t *testing.T) {
	rdb, prefix := redistest.Shared(t)
	proxy := faultproxy.NewHolder(t, redistest.Addr())
	cut := redis.NewClient(&redis.Options{Addr: proxy.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 500 * time.Millisecond})
	t.Cleanup(func() { _ = cut.Close() })
	reader := open(t, cut, prefix, WithHeadCheck(50*time.Millisecond))
	writer := open(t, rdb, prefix)
	var mu sync.Mutex
	var firsts []int64
	var last atomic.Int64
	defer reader.Subscribe(func(evs []store.Event) {
		mu.Lock()
		firsts = append(firsts, evs[0].Revision())
		mu.Unlock()
		last.Store(evs[len(evs)-1].Revision())
	})()
	proxy.Partition()
	for i := range 10 {
		if _, err := writer.Put(context.Background(), store.Put{Key: fmt.Sprintf("/g/%d", i%2), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	if err := writer.Compact(context.Background(), 8); err != nil {
		t.Fatal(err)
	}
	proxy.Heal()
	waitRevision(t, &last, 10, 10*time.Second)
	mu.Lock()
	defer mu.Unlock()
	if firsts[0] != 9 {
		t.Fatalf("first batch after the gap starts at %d, want 9", firsts[0])
	}
}

func TestOpenFailsUnavailable(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer rdb.Close()
	_, err := Open(context.Background(), rdb, "p")
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Open against nothing = %v, want ErrUnavailable", err)
	}
}

func TestOpenRejectsABadPrefix(t *testing.T) {
	rdb, _ := redistest.Shared(t)
	for _, p := range []string{"", "a{b", "c}"} {
		if _, err := Open(context.Background(), rdb, p); err == nil {
			t.Errorf("Open(prefix %q) succeeded", p)
		}
	}
}

func TestNewClientReadsEveryKindOfURL(t *testing.T) {
	for _, c := range []struct {
		url  string
		want string // the client's type, or "error"
	}{
		{"redis://127.0.0.1:6379/0", "*redis.Client"},
		{"rediss://u:p@example.com:6380/2", "*redis.Client"},
		{"redis+cluster://h1:7000,h2:7001", "*redis.ClusterClient"},
		{"redis+sentinel://u:p@h1:26379,h2:26379/mymaster/3", "*redis.Client"},
		{"redis+sentinel://h1:26379", "error"},
		{"redis+cluster://h1:7000/1", "error"},
		{"memcached://h", "error"},
		{"127.0.0.1:6379", "error"},
	} {
		rdb, err := NewClient(c.url)
		got := "error"
		if err == nil {
			got = fmt.Sprintf("%T", rdb)
			_ = rdb.Close()
		}
		if got != c.want {
			t.Errorf("NewClient(%q) = %s (%v), want %s", c.url, got, err, c.want)
		}
	}
	rdb, err := NewClient("redis://" + redistest.Addr() + "/0")
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

// TestConformanceOnACluster runs the conformance suites on a Redis Cluster
// of three primaries, through the universal client a redis+cluster URL
// gives: every key of a store shares one hash slot, its scripts and its
// notices work there as on one server.
func TestConformanceOnACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	addrs := redistest.StartCluster(t, 3)
	url := "redis+cluster://" + strings.Join(addrs, ",")
	client := func(t *testing.T) redis.UniversalClient {
		rdb, err := NewClient(url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rdb.Close() })
		return rdb
	}
	storetest.Run(t, func(t *testing.T) store.Store { return open(t, client(t), redistest.Prefix()) })
	storetest.RunShared(t, func(t *testing.T) (store.Store, store.Store) {
		prefix := redistest.Prefix()
		return open(t, client(t), prefix), open(t, client(t), prefix)
	})
}

// TestASentinelURL opens a store through a Sentinel (a redis+sentinel
// URL): the client finds the primary from the Sentinel, and writes reach
// another handle's subscribers.
func TestASentinelURL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server and a sentinel")
	}
	primary := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, "pawlmaster", primary.Addr)
	storetest.RunShared(t, func(t *testing.T) (store.Store, store.Store) {
		prefix := redistest.Prefix()
		var handles [2]store.Store
		for i := range handles {
			rdb, err := NewClient("redis+sentinel://" + sentinel + "/pawlmaster/0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = rdb.Close() })
			handles[i] = open(t, rdb, prefix)
		}
		return handles[0], handles[1]
	})
}
