package boltstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"

	"github.com/pawlcfg/pawl/server/internal/store"
	"github.com/pawlcfg/pawl/server/internal/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t *testing.T, dir string, opts ...Option) *Store {
	t.Helper()
	s, err := Open(context.Background(), dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t, t.TempDir()) })
}

func TestReopenKeepsKeysAndRevision(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	ctx := context.Background()
	for i := range 10 {
		if _, err := s.Put(ctx, store.Put{Key: fmt.Sprintf("/r/%d", i%3), Value: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Delete(ctx, store.Delete{Key: "/r/0"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir)
	st, err := s.Status(ctx)
	if err != nil || st.Revision != 11 {
		t.Fatalf("reopened at %+v, %v; want revision 11", st, err)
	}
	page, err := s.List(ctx, "/r/", 0, "", 10)
	if err != nil || len(page.KVs) != 2 || string(page.KVs[0].Value) != "7" || string(page.KVs[1].Value) != "8" {
		t.Fatalf("reopened listing = %+v, %v", page.KVs, err)
	}
	res, err := s.Put(ctx, store.Put{Key: "/r/new"})
	if err != nil || res.Revision != 12 {
		t.Fatalf("first put after reopen got revision %d, %v; want 12", res.Revision, err)
	}
}

func TestSecondOpenOfSameDirectoryFails(t *testing.T) {
	dir := t.TempDir()
	open(t, dir)
	_, err := Open(context.Background(), dir)
	if err == nil || !strings.Contains(err.Error(), "locked by another process") {
		t.Fatalf("second Open = %v, want a locked error", err)
	}
}

func TestCompactionKeepsTheLastPutOfEachKey(t *testing.T) {
	s := open(t, t.TempDir())
	ctx := context.Background()
	for i := range 20 {
		if _, err := s.Put(ctx, store.Put{Key: fmt.Sprintf("/e/%d", i%4), Value: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Compact(ctx, 15); err != nil {
		t.Fatal(err)
	}
	// Only the last put of each key at or below the compact revision stays:
	// 4 kept entries plus the 5 retained revisions.
	var logEntries int
	if err := s.db.View(func(tx *bolt.Tx) error { logEntries = tx.Bucket(bucketLog).Stats().KeyN; return nil }); err != nil {
		t.Fatal(err)
	}
	if logEntries != 9 {
		t.Fatalf("log holds %d entries, want 9", logEntries)
	}
}

func TestRevisionAtReadsEventTimes(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	s := open(t, t.TempDir(), withClock(clock))
	ctx := context.Background()
	start := clock()
	for i := range 6 {
		if _, err := s.Put(ctx, store.Put{Key: "/age", Value: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
		advance(20 * time.Minute)
	}
	// Revisions 1..6 at 0, 20, ..., 100 minutes.
	for _, c := range []struct {
		at   time.Duration
		want int64
	}{{-time.Minute, 0}, {0, 1}, {50 * time.Minute, 3}, {100 * time.Minute, 6}, {time.Hour * 5, 6}} {
		if got, err := s.RevisionAt(ctx, start.Add(c.at)); err != nil || got != c.want {
			t.Errorf("RevisionAt(+%s) = %d, %v; want %d", c.at, got, err, c.want)
		}
	}
}

func TestOptionsAreValidated(t *testing.T) {
	for _, opt := range []Option{WithMaxBatch(0)} {
		if _, err := Open(context.Background(), t.TempDir(), opt); err == nil {
			t.Errorf("Open accepted an invalid option")
		}
	}
}
