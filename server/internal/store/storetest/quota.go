package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/pawlcfg/pawl/server/internal/store"
)

// QuotaOpener returns a new, empty store with the quota q; the store
// implements store.UsageReporter. RunQuota closes it.
type QuotaOpener func(t *testing.T, q store.Quota) store.Store

// QuotaSuite is how RunQuota measures an engine.
type QuotaSuite struct {
	// Open opens a store with a quota.
	Open QuotaOpener
	// Slack is how far the engine's size may end past the quota after
	// writes it admitted: what its size grows by beyond store.PutCost (0
	// for an engine that counts exactly that).
	Slack int64
	// OpenShared, when set, opens two handles on one new backend with a
	// quota (two servers sharing it), for the racing writers: half write
	// through each.
	OpenShared func(t *testing.T, q store.Quota) (a, b store.Store)
	// Reopen, when set, closes s and opens its data again with quota q,
	// for the test that the alarm comes back after a restart.
	Reopen func(t *testing.T, s store.Store, q store.Quota) store.Store
}

// reservedPrefix is the keys whose puts may use the reserve in these
// tests, as the server lets a fleet's reports.
const reservedPrefix = "/reports/"

// RunQuota runs the quota's conformance tests: a store filled to its
// quota refuses writes that add bytes, with a *store.QuotaError, and
// raises the NOSPACE alarm; reads, deletions and compaction still work,
// and after deletions and compaction the alarm clears and writes work
// again; writers racing to the quota end within Slack past it; the
// reserve lets reports in, to its own bound.
func RunQuota(t *testing.T, suite QuotaSuite) {
	// The quota is set above what an empty store already holds.
	base := func(t *testing.T) int64 {
		s := suite.Open(t, store.Quota{})
		defer s.Close()
		return usage(t, s).Used
	}(t)
	quota := func(room int64) store.Quota {
		return store.Quota{Bytes: base + room, Reserve: 64 << 10, Reserved: func(key string) bool { return strings.HasPrefix(key, reservedPrefix) }}
	}
	t.Run("FillRefuseDeleteCompactRecover", func(t *testing.T) {
		s := suite.Open(t, quota(256<<10))
		t.Cleanup(func() { _ = s.Close() })
		testQuotaFill(t, s, suite.Slack)
	})
	t.Run("RacingWritersBounded", func(t *testing.T) {
		stores := []store.Store{}
		if suite.OpenShared != nil {
			a, b := suite.OpenShared(t, quota(256<<10))
			stores = append(stores, a, b)
		} else {
			stores = append(stores, suite.Open(t, quota(256<<10)))
		}
		t.Cleanup(func() {
			for _, s := range stores {
				_ = s.Close()
			}
		})
		testQuotaRace(t, stores, suite.Slack)
	})
	t.Run("ReserveForReports", func(t *testing.T) {
		s := suite.Open(t, quota(64<<10))
		t.Cleanup(func() { _ = s.Close() })
		testQuotaReserve(t, s, suite.Slack)
	})
	if suite.Reopen != nil {
		t.Run("AlarmAfterRestart", func(t *testing.T) {
			q := quota(64 << 10)
			s := suite.Open(t, q)
			// Over the quota, with reports in the reserve.
			fill(t, s, "/fill/", 1<<10)
			fill(t, s, reservedPrefix, 1<<10)
			s = suite.Reopen(t, s, q)
			t.Cleanup(func() { _ = s.Close() })
			u := usage(t, s)
			if u.Alarm == nil || u.Quota != q.Bytes {
				t.Fatalf("after a restart over the quota: %+v; want the NOSPACE alarm raised again", u)
			}
			if _, err := s.Put(context.Background(), store.Put{Key: "/after", Value: []byte("x")}); !errors.Is(err, store.ErrQuotaExceeded) {
				t.Fatalf("a put after the restart: %v; want it refused for the quota", err)
			}
		})
	}
}

func usage(t *testing.T, s store.Store) store.Usage {
	t.Helper()
	r, ok := s.(store.UsageReporter)
	if !ok {
		t.Fatalf("%T does not report its usage", s)
	}
	u, err := r.Usage(context.Background())
	if err != nil {
		t.Fatalf("Usage: %v", err)
	}
	return u
}

// fill puts values of size bytes under prefix until the quota refuses
// one, and returns how many it put and the refusal.
func fill(t *testing.T, s store.Store, prefix string, size int) (int, *store.QuotaError) {
	t.Helper()
	value := []byte(strings.Repeat("v", size))
	for i := 0; ; i++ {
		_, err := s.Put(context.Background(), store.Put{Key: fmt.Sprintf("%s%06d", prefix, i), Value: value})
		var qe *store.QuotaError
		switch {
		case errors.As(err, &qe):
			return i, qe
		case err != nil:
			t.Fatalf("put %d: %v", i, err)
		case i > 100_000:
			t.Fatalf("%d puts of %d bytes and no refusal: %+v", i, size, usage(t, s))
		}
	}
}

func testQuotaFill(t *testing.T, s store.Store, slack int64) {
	ctx := context.Background()
	n, qe := fill(t, s, "/fill/", 2<<10)
	u := usage(t, s)
	if n == 0 || qe.Quota != u.Quota || qe.Cost < store.PutCost("/fill/000000", make([]byte, 2<<10)) || !strings.Contains(qe.Error(), fmt.Sprint(u.Quota)) {
		t.Fatalf("refused after %d puts with %v (%+v); want the quota %d named", n, qe, qe, u.Quota)
	}
	if u.Alarm == nil || u.Alarm.Kind != store.AlarmNoSpace || u.Alarm.Since.IsZero() {
		t.Fatalf("usage after the refusal: %+v; want the NOSPACE alarm", u)
	}
	t.Logf("refused after %d puts at %d bytes of a %d-byte quota", n, u.Used, u.Quota)
	if u.Used > u.Quota+slack {
		t.Fatalf("the store holds %d bytes, past its quota %d by more than %d", u.Used, u.Quota, slack)
	}
	// Every write that adds bytes is refused while the alarm is raised,
	// however small.
	if _, err := s.Put(ctx, store.Put{Key: "/small", Value: []byte("x")}); !errors.Is(err, store.ErrQuotaExceeded) {
		t.Fatalf("a small put under the alarm: %v", err)
	}
	if _, err := s.Txn(ctx, store.Txn{Puts: []store.Put{{Key: "/t1", Value: []byte("x")}}, Deletes: []string{"/fill/000000"}}); !errors.Is(err, store.ErrQuotaExceeded) {
		t.Fatalf("a transaction with a put under the alarm: %v", err)
	}
	if _, err := s.PutBlob(ctx, "v", store.Blob{ID: "b", Data: []byte("module")}); !errors.Is(err, store.ErrQuotaExceeded) {
		t.Fatalf("a blob under the alarm: %v", err)
	}
	if _, _, err := s.Get(ctx, "/t1", 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused transaction wrote: %v", err)
	}
	// Reads work.
	if kv, _, err := s.Get(ctx, "/fill/000000", 0); err != nil || len(kv.Value) != 2<<10 {
		t.Fatalf("Get under the alarm: %v", err)
	}
	page, err := s.List(ctx, "/fill/", 0, "", 10_000)
	if err != nil || len(page.KVs) != n {
		t.Fatalf("List under the alarm: %d keys, %v; want %d", len(page.KVs), err, n)
	}
	if _, err := s.Changes(ctx, 1, "/fill/", 10); err != nil {
		t.Fatalf("Changes under the alarm: %v", err)
	}
	// Deletions work, single and in a transaction without puts, though
	// each appends to the change log.
	if _, err := s.Delete(ctx, store.Delete{Key: "/fill/000000"}); err != nil {
		t.Fatalf("Delete under the alarm: %v", err)
	}
	var rest []string
	for _, kv := range page.KVs[1:] {
		rest = append(rest, kv.Key)
	}
	if _, err := s.Txn(ctx, store.Txn{Deletes: rest}); err != nil {
		t.Fatalf("a transaction of deletions under the alarm: %v", err)
	}
	if _, _, err := s.Get(ctx, "/fill/000001", 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get after the deletes: %v", err) // and bbolt holds them
	}
	deleted := usage(t, s).Used
	if err := s.Compact(ctx, revision(t, s)); err != nil {
		t.Fatalf("Compact under the alarm: %v", err)
	}
	u = usage(t, s)
	t.Logf("after deletions: %d bytes; and compaction: %d bytes of a %d-byte quota", deleted, u.Used, u.Quota)
	// Compaction frees the history: at least every value the log held.
	if freed := deleted - u.Used; freed < int64(n*(2<<10)) {
		t.Fatalf("compaction freed %d bytes of the history of %d values of %d bytes", freed, n, 2<<10)
	}
	if low := (store.Quota{Bytes: u.Quota}).LowWater(); u.Alarm != nil || u.Used >= low {
		t.Fatalf("after deleting everything and compacting: %+v; want the alarm cleared, under nine tenths of the quota", u)
	}
	if _, err := s.Put(ctx, store.Put{Key: "/again", Value: []byte("x")}); err != nil {
		t.Fatalf("a put after the alarm cleared: %v", err)
	}
	if _, err := s.PutBlob(ctx, "v", store.Blob{ID: "b", Data: []byte("module")}); err != nil {
		t.Fatalf("a blob after the alarm cleared: %v", err)
	}
}

// testQuotaRace: writers racing to the quota (through every handle of a
// shared backend), each admitted against what the others added, end
// within the engine's slack past it.
func testQuotaRace(t *testing.T, stores []store.Store, slack int64) {
	const writers = 8
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[w%len(stores)]
			value := []byte(strings.Repeat("r", 4<<10))
			for i := 0; ; i++ {
				_, err := s.Put(context.Background(), store.Put{Key: fmt.Sprintf("/race/%d/%06d", w, i), Value: value})
				if errors.Is(err, store.ErrQuotaExceeded) {
					return
				}
				if err != nil || i > 100_000 {
					t.Errorf("writer %d, put %d: %v", w, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	u := usage(t, stores[0])
	t.Logf("racing writers ended at %d bytes of a %d-byte quota", u.Used, u.Quota)
	if u.Used > u.Quota+slack || u.Alarm == nil {
		t.Fatalf("after racing writers: %+v; want at most %d bytes past the quota, and the alarm", u, slack)
	}
}

// testQuotaReserve: under the alarm, the keys the quota reserves for
// reports (and records) still go in, up to the reserve.
func testQuotaReserve(t *testing.T, s store.Store, slack int64) {
	ctx := context.Background()
	fill(t, s, "/fill/", 1<<10)
	if err := s.PutRecords(ctx, "leases", []store.Record{{ID: "i1", Value: []byte("lease")}}); err != nil {
		t.Fatalf("a record under the alarm: %v", err)
	}
	if _, err := s.Txn(ctx, store.Txn{Puts: []store.Put{{Key: reservedPrefix + "x", Value: []byte("ack")}, {Key: "/not-reserved", Value: []byte("x")}}}); !errors.Is(err, store.ErrQuotaExceeded) {
		t.Fatalf("a transaction with one put outside the reserve: %v", err)
	}
	n, qe := fill(t, s, reservedPrefix, 1<<10)
	u := usage(t, s)
	if n == 0 || !qe.Reserved || !strings.Contains(qe.Error(), "reserve") {
		t.Fatalf("%d reports under the alarm, then %v", n, qe)
	}
	if u.Used > u.Quota+u.Reserve+slack {
		t.Fatalf("the reports took the store to %d bytes, past quota %d and reserve %d by more than %d", u.Used, u.Quota, u.Reserve, slack)
	}
}
