package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pawlcfg/pawl/internal/testkit/faultproxy"
	"github.com/pawlcfg/pawl/internal/testkit/redistest"
	"github.com/pawlcfg/pawl/server/internal/store"
)

// staleWatch records what a store's NotifyStale reports, and lets a test
// await a report that matches.
type staleWatch struct {
	mu      sync.Mutex
	reports []error
	changed chan struct{}
}

func watchStale(t *testing.T, s *Store) *staleWatch {
	w := &staleWatch{changed: make(chan struct{})}
	t.Cleanup(s.NotifyStale(func(err error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.reports = append(w.reports, err)
		close(w.changed)
		w.changed = make(chan struct{})
	}))
	return w
}

// await waits until a report matches.
func (w *staleWatch) await(t *testing.T, what string, match func(error) bool) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		w.mu.Lock()
		for _, err := range w.reports {
			if match(err) {
				w.mu.Unlock()
				return
			}
		}
		changed := w.changed
		w.mu.Unlock()
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("the feed never reported %s (reports: %v)", what, w.reports)
		}
	}
}

func newClient(t *testing.T, addr string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// TestRedisGoingBackInTimeIsNoticed: a private redis-server saves an RDB
// snapshot, two replicas write on under load, and Redis is killed and
// restarted from the snapshot. Every replica notices: its feed says stale
// with store.ErrRolledBack, writes are refused with it (also through a
// replica opened after the restart, which saw nothing), and no revision is
// handed out twice. A replica opened with WithAcceptRollback accepts it:
// the revision counter jumps past every revision handed out, the feeds
// follow again after a compacted stretch, writes go on above every
// revision acknowledged before, and what the snapshot lacked is gone.
func TestRedisGoingBackInTimeIsNoticed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and restarts a redis-server")
	}
	srv := redistest.Start(t)
	bg := context.Background()
	a := open(t, newClient(t, srv.Addr), "back", WithHeadCheck(50*time.Millisecond), WithName("replica-a"))
	b := open(t, newClient(t, srv.Addr), "back", WithHeadCheck(50*time.Millisecond), WithName("replica-b"))
	firstStatus, err := a.Status(bg)
	if err != nil || firstStatus.Incarnation == "" {
		t.Fatalf("Status = %+v, %v; want the data set's incarnation", firstStatus, err)
	}
	staleB := watchStale(t, b)
	var subMu sync.Mutex
	var delivered []int64 // every revision b's subscribers got
	t.Cleanup(b.Subscribe(func(evs []store.Event) {
		subMu.Lock()
		defer subMu.Unlock()
		for _, ev := range evs {
			delivered = append(delivered, ev.Revision())
		}
	}))
	for i := range 50 {
		if _, err := a.Put(bg, store.Put{Key: fmt.Sprintf("/kept/%d", i), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.Client(t).Save(bg).Err(); err != nil {
		t.Fatal(err)
	}
	snap, err := a.Status(bg)
	if err != nil {
		t.Fatal(err)
	}

	// Writers on both replicas, through the kill and the restart.
	var mu sync.Mutex
	acked := map[int64]string{} // revision -> key, before and after the restart
	var afterRestart, refused int
	restarted := make(chan struct{})
	ctx, cancel := context.WithCancel(bg)
	var wg sync.WaitGroup
	for w, s := range []*Store{a, b, a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				key := fmt.Sprintf("/lost/%d/%d", w, i)
				var sentAfterRestart bool
				select {
				case <-restarted:
					sentAfterRestart = true
				default:
				}
				res, err := s.Put(ctx, store.Put{Key: key, Value: []byte("v")})
				mu.Lock()
				switch {
				case err == nil:
					if prev, dup := acked[res.Revision]; dup {
						t.Errorf("revision %d handed out twice: %s and %s", res.Revision, prev, key)
					}
					acked[res.Revision] = key
					if sentAfterRestart {
						afterRestart++
					}
				case errors.Is(err, store.ErrRolledBack):
					refused++
				case errors.Is(err, store.ErrUnavailable), ctx.Err() != nil:
				default:
					t.Errorf("write %s: %v", key, err)
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(5 * time.Millisecond) // pace the retries of a refused writer
				}
			}
		}()
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		waitUnder(t, &mu, what, cond, func() string { return "" })
	}
	waitFor("300 writes after the snapshot", func() bool { return len(acked) >= 300 })
	srv.Kill(t)
	srv.Restart(t)
	close(restarted)
	waitFor("40 writes refused after the restart", func() bool { return refused >= 40 })
	cancel()
	wg.Wait()
	if afterRestart > 0 {
		t.Errorf("%d writes were acknowledged by a Redis that went back in time", afterRestart)
	}
	var highest int64
	for rev := range acked {
		highest = max(highest, rev)
	}
	staleB.await(t, "ErrRolledBack", func(err error) bool { return errors.Is(err, store.ErrRolledBack) })
	var rb *store.RolledBackError
	if !errors.As(b.FeedError(), &rb) || rb.Head != snap.Revision || rb.Delivered < snap.Revision+300 {
		t.Fatalf("b's feed error: %v; want a rollback to head %d from at least %d", b.FeedError(), snap.Revision, snap.Revision+300)
	}
	t.Logf("found: %v", rb)

	// A replica that opens now saw none of it, and is refused all the same.
	c := open(t, newClient(t, srv.Addr), "back")
	if _, err := c.Put(bg, store.Put{Key: "/new", Value: []byte("v")}); !errors.Is(err, store.ErrRolledBack) {
		t.Fatalf("a write through a replica opened after the rollback: %v; want ErrRolledBack", err)
	}
	if !errors.Is(c.FeedError(), store.ErrRolledBack) {
		t.Fatalf("the new replica's feed error: %v; want ErrRolledBack", c.FeedError())
	}

	// The operator accepts.
	d := open(t, newClient(t, srv.Addr), "back", WithAcceptRollback())
	acc := d.Accepted()
	if acc == nil || acc.Head != snap.Revision || acc.Highest < highest || acc.ContinuedAt != acc.Highest+1 {
		t.Fatalf("accepted %+v; want head %d, highest at least %d, continued one past it", acc, snap.Revision, highest)
	}
	staleB.await(t, "following again", func(err error) bool { return err == nil })
	// Watchers that resume with the incarnation they knew are told to
	// resynchronise: Status names the new one.
	if st, err := d.Status(bg); err != nil || st.Incarnation == firstStatus.Incarnation || st.Incarnation == "" {
		t.Fatalf("Status after the acceptance = %+v, %v; want an incarnation other than %q", st, err, firstStatus.Incarnation)
	}
	for _, s := range []*Store{a, b, c, d} {
		res, err := s.Put(bg, store.Put{Key: "/after", Value: []byte("v")})
		if err != nil {
			t.Fatalf("a write after the acceptance: %v", err)
		}
		if res.Revision <= highest {
			t.Fatalf("a write after the acceptance took revision %d; %d was handed out before", res.Revision, highest)
		}
	}
	for rev, key := range acked {
		if _, _, err := d.Get(bg, key, 0); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("%s (revision %d, after the snapshot) after the acceptance: %v; want not found", key, rev, err)
		}
	}
	if kv, _, err := d.Get(bg, "/kept/49", 0); err != nil || kv.ModRevision != snap.Revision {
		t.Fatalf("/kept/49 after the acceptance: %+v, %v; want it at %d", kv, err, snap.Revision)
	}
	if _, err := d.Changes(bg, snap.Revision, "", 10); !errors.Is(err, store.ErrCompacted) {
		t.Fatalf("the log before the acceptance: %v; want compacted", err)
	}
	subMu.Lock()
	defer subMu.Unlock()
	for i := 1; i < len(delivered); i++ {
		if delivered[i] <= delivered[i-1] {
			t.Fatalf("b's subscribers got revision %d after %d", delivered[i], delivered[i-1])
		}
	}
	t.Logf("snapshot at %d; %d writes acknowledged after it, up to %d; %d refused; continued at %d", snap.Revision, len(acked), highest, refused, acc.ContinuedAt)
}

// TestAnotherDataSetIsNoticed: Redis without persistence restarts empty
// and a replica opened after it writes past what an older replica handed
// out. The head is no longer below it, but the incarnation changed: the
// older replica refuses, naming both data sets.
//
// The older replica is cut off from Redis (through a proxy) while Redis
// restarts and the newer one writes: its feed may still have a read to
// make (a wake-up its own last write left), and a read of the empty data
// set would record the rollback first, as the head below what it handed
// out, before the newer replica gave the data set an identity: every
// replica, the newer one too, would then refuse, and no other data set
// would be named. (That is right too; it is not what this test is for.)
func TestAnotherDataSetIsNoticed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and restarts a redis-server")
	}
	srv := redistest.Start(t)
	proxy := faultproxy.NewHolder(t, srv.Addr)
	bg := context.Background()
	a := open(t, newClient(t, proxy.Addr), "other", WithHeadCheck(time.Hour))
	for i := range 5 {
		if _, err := a.Put(bg, store.Put{Key: fmt.Sprintf("/old/%d", i), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	before := a.Incarnation()
	proxy.Partition()
	srv.Kill(t)
	srv.Restart(t)
	c := open(t, newClient(t, srv.Addr), "other", WithHeadCheck(time.Hour), WithNoticeFilter(func(int64) bool { return true }))
	for i := range 10 {
		if _, err := c.Put(bg, store.Put{Key: fmt.Sprintf("/new/%d", i), Value: []byte("v")}); err != nil {
			t.Fatalf("a write through the newer replica: %v", err)
		}
	}
	proxy.Heal()
	_, err := a.Put(bg, store.Put{Key: "/old/next", Value: []byte("v")})
	var rb *store.RolledBackError
	if !errors.As(err, &rb) || rb.Incarnation != before || rb.Found != c.Incarnation() || rb.Found == before {
		t.Fatalf("a write through the older replica: %v; want a rollback naming incarnation %s and the newer replica's, %s", err, before, c.Incarnation())
	}
	t.Log(err)
}

// waitUnder polls cond under mu until it holds, for at most a minute: the
// writers' counters have no event to await. On a timeout it fails the
// test with what never happened and what stop (which ends the writers)
// says.
func waitUnder(t *testing.T, mu *sync.Mutex, what string, cond func() bool, stop func() string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		ok := cond()
		mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never happened %s", what, stop())
		}
	}
}
