// Package storetest is the conformance suite every store.Store engine passes.
// An engine's test calls Run with a function that opens a fresh, empty store.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pawlcfg/pawl/server/internal/store"
)

// Opener returns a new, empty store; Run closes it.
type Opener func(t *testing.T) store.Store

// Run runs every conformance test against stores from open.
func Run(t *testing.T, open Opener) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"RevisionsIncrease", testRevisionsIncrease},
		{"CompareAndSwap", testCompareAndSwap},
		{"Delete", testDelete},
		{"GetAtRevision", testGetAtRevision},
		{"List", testList},
		{"ListAtRevision", testListAtRevision},
		{"Changes", testChanges},
		{"Compact", testCompact},
		{"Subscribe", testSubscribe},
		{"ConcurrentWriters", testConcurrentWriters},
		{"MatchesModel", testMatchesModel},
		{"Txn", testTxn},
		{"ConcurrentTxnOneWins", testConcurrentTxnOneWins},
		{"TxnUnchanged", testTxnUnchanged},
		{"EachAtIsOneSnapshot", testEachAtIsOneSnapshot},
		{"Blobs", testBlobs},
		{"Records", testRecords},
		{"RevisionAt", testRevisionAt},
		{"TxnDeliveredWhole", testTxnDeliveredWhole},
		{"TxnPutsAndDeletes", testTxnPutsAndDeletes},
		{"Closed", testClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() { _ = s.Close() })
			tt.fn(t, s)
		})
	}
}

func ptr(v int64) *int64 { return &v }

func mustPut(t *testing.T, s store.Store, key, value string) int64 {
	t.Helper()
	res, err := s.Put(context.Background(), store.Put{Key: key, Value: []byte(value)})
	if err != nil {
		t.Fatalf("Put(%s): %v", key, err)
	}
	return res.Revision
}

func mustDelete(t *testing.T, s store.Store, key string) int64 {
	t.Helper()
	res, err := s.Delete(context.Background(), store.Delete{Key: key})
	if err != nil {
		t.Fatalf("Delete(%s): %v", key, err)
	}
	return res.Revision
}

func revision(t *testing.T, s store.Store) int64 {
	t.Helper()
	st, err := s.Status(context.Background())
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	return st.Revision
}

func testRevisionsIncrease(t *testing.T, s store.Store) {
	ctx := context.Background()
	if got := revision(t, s); got != 0 {
		t.Fatalf("empty store at revision %d, want 0", got)
	}
	for i := int64(1); i <= 5; i++ {
		if got := mustPut(t, s, "/a", fmt.Sprint(i)); got != i {
			t.Fatalf("put %d got revision %d", i, got)
		}
	}
	kv, at, err := s.Get(ctx, "/a", 0)
	if err != nil {
		t.Fatal(err)
	}
	want := store.KeyValue{Key: "/a", Value: []byte("5"), CreateRevision: 1, ModRevision: 5, Version: 5}
	if !equalKV(kv, want) || at != 5 {
		t.Fatalf("Get = %+v at %d, want %+v at 5", kv, at, want)
	}
	res, err := s.Put(ctx, store.Put{Key: "/a", Value: []byte("6")})
	if err != nil || res.Prev == nil || !equalKV(*res.Prev, want) {
		t.Fatalf("Put prev = %+v, %v; want %+v", res.Prev, err, want)
	}
}

func testCompareAndSwap(t *testing.T, s store.Store) {
	ctx := context.Background()
	res, err := s.Put(ctx, store.Put{Key: "/cas", Value: []byte("1"), ExpectModRevision: ptr(0)})
	if err != nil || res.Revision != 1 {
		t.Fatalf("create-only put: %v, %v", res, err)
	}
	_, err = s.Put(ctx, store.Put{Key: "/cas", Value: []byte("x"), ExpectModRevision: ptr(0)})
	var mismatch *store.RevisionMismatchError
	if !errors.As(err, &mismatch) || !errors.Is(err, store.ErrRevisionMismatch) || mismatch.Actual != 1 || mismatch.Expected != 0 {
		t.Fatalf("create-only put on existing key: %v, want mismatch at 1", err)
	}
	_, err = s.Put(ctx, store.Put{Key: "/cas", Value: []byte("x"), ExpectModRevision: ptr(7)})
	if !errors.Is(err, store.ErrRevisionMismatch) {
		t.Fatalf("put with wrong revision: %v", err)
	}
	if got := revision(t, s); got != 1 {
		t.Fatalf("failed CAS advanced the revision to %d", got)
	}
	if kv, _, _ := s.Get(ctx, "/cas", 0); string(kv.Value) != "1" {
		t.Fatalf("failed CAS changed the value to %q", kv.Value)
	}
	res, err = s.Put(ctx, store.Put{Key: "/cas", Value: []byte("2"), ExpectModRevision: ptr(1)})
	if err != nil || res.Revision != 2 {
		t.Fatalf("matching CAS: %v, %v", res, err)
	}
	_, err = s.Put(ctx, store.Put{Key: "/absent", Value: []byte("2"), ExpectModRevision: ptr(2)})
	if !errors.As(err, &mismatch) || mismatch.Actual != 0 {
		t.Fatalf("CAS on absent key: %v", err)
	}
}

func testDelete(t *testing.T, s store.Store) {
	ctx := context.Background()
	_, err := s.Delete(ctx, store.Delete{Key: "/nope"})
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("delete of absent key: %v", err)
	}
	if got := revision(t, s); got != 0 {
		t.Fatalf("failed delete advanced the revision to %d", got)
	}
	mustPut(t, s, "/d", "v")
	if _, err := s.Delete(ctx, store.Delete{Key: "/d", ExpectModRevision: ptr(9)}); !errors.Is(err, store.ErrRevisionMismatch) {
		t.Fatalf("delete with wrong revision: %v", err)
	}
	res, err := s.Delete(ctx, store.Delete{Key: "/d", ExpectModRevision: ptr(1)})
	if err != nil || res.Revision != 2 || res.Prev == nil || string(res.Prev.Value) != "v" {
		t.Fatalf("delete: %+v, %v", res, err)
	}
	if _, _, err := s.Get(ctx, "/d", 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	// A re-created key starts a new life: version 1, new create revision.
	mustPut(t, s, "/d", "again")
	kv, _, err := s.Get(ctx, "/d", 0)
	if err != nil || kv.Version != 1 || kv.CreateRevision != 3 {
		t.Fatalf("re-created key = %+v, %v", kv, err)
	}
}

func testGetAtRevision(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustPut(t, s, "/g", "1")  // 1
	mustPut(t, s, "/g2", "x") // 2
	mustPut(t, s, "/g", "3")  // 3
	mustDelete(t, s, "/g")    // 4
	mustPut(t, s, "/g", "5")  // 5
	want := map[int64]string{1: "1", 2: "1", 3: "3", 5: "5"}
	for rev := int64(1); rev <= 5; rev++ {
		kv, at, err := s.Get(ctx, "/g", rev)
		if w, ok := want[rev]; ok {
			if err != nil || string(kv.Value) != w || at != rev {
				t.Errorf("Get(/g, %d) = %q at %d, %v; want %q", rev, kv.Value, at, err, w)
			}
		} else if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Get(/g, %d) = %q, %v; want not found", rev, kv.Value, err)
		}
	}
	_, _, err := s.Get(ctx, "/g", 6)
	var future *store.FutureRevisionError
	if !errors.As(err, &future) || future.Revision != 5 {
		t.Fatalf("Get at future revision: %v", err)
	}
	if _, _, err := s.Get(ctx, "/g2", 1); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get(/g2, 1) before it existed: %v", err)
	}
}

func testList(t *testing.T, s store.Store) {
	ctx := context.Background()
	for _, k := range []string{"/b/2", "/a", "/b/1", "/b/3", "/c", "/b"} {
		mustPut(t, s, k, k)
	}
	page, err := s.List(ctx, "/b/", 0, "", 10)
	if err != nil || keys(page.KVs) != "/b/1 /b/2 /b/3" || page.More || page.Revision != 6 {
		t.Fatalf("List(/b/) = %q more=%v rev=%d, %v", keys(page.KVs), page.More, page.Revision, err)
	}
	page, err = s.List(ctx, "", 0, "", 2)
	if err != nil || keys(page.KVs) != "/a /b" || !page.More {
		t.Fatalf("List page 1 = %q more=%v, %v", keys(page.KVs), page.More, err)
	}
	page, err = s.List(ctx, "", 0, "/b", 3)
	if err != nil || keys(page.KVs) != "/b/1 /b/2 /b/3" || !page.More {
		t.Fatalf("List page 2 = %q more=%v, %v", keys(page.KVs), page.More, err)
	}
	page, err = s.List(ctx, "", 0, "/b/3", 3)
	if err != nil || keys(page.KVs) != "/c" || page.More {
		t.Fatalf("List page 3 = %q more=%v, %v", keys(page.KVs), page.More, err)
	}
}

func testListAtRevision(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustPut(t, s, "/l/a", "1") // 1
	mustPut(t, s, "/l/b", "2") // 2
	mustPut(t, s, "/l/a", "3") // 3
	mustDelete(t, s, "/l/b")   // 4
	mustPut(t, s, "/l/c", "5") // 5
	mustPut(t, s, "/m", "6")   // 6
	for rev, want := range map[int64]string{1: "/l/a=1", 2: "/l/a=1 /l/b=2", 3: "/l/a=3 /l/b=2", 4: "/l/a=3", 5: "/l/a=3 /l/c=5"} {
		page, err := s.List(ctx, "/l/", rev, "", 10)
		if err != nil || keyValues(page.KVs) != want || page.Revision != rev {
			t.Errorf("List(/l/, %d) = %q, %v; want %q", rev, keyValues(page.KVs), err, want)
		}
	}
	page, err := s.List(ctx, "/l/", 3, "/l/a", 1)
	if err != nil || keyValues(page.KVs) != "/l/b=2" || page.More {
		t.Fatalf("List(/l/, 3, after /l/a) = %q more=%v, %v", keyValues(page.KVs), page.More, err)
	}
	page, err = s.List(ctx, "/l/", 2, "", 1)
	if err != nil || keyValues(page.KVs) != "/l/a=1" || !page.More {
		t.Fatalf("List(/l/, 2, limit 1) = %q more=%v, %v", keyValues(page.KVs), page.More, err)
	}
}

func testChanges(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustPut(t, s, "/x/1", "a") // 1
	mustPut(t, s, "/y/1", "b") // 2
	mustPut(t, s, "/x/2", "c") // 3
	mustDelete(t, s, "/x/1")   // 4
	ch, err := s.Changes(ctx, 1, "/x/", 100)
	if err != nil || ch.Through != 4 || len(ch.Events) != 3 {
		t.Fatalf("Changes(1, /x/) = %+v, %v", ch, err)
	}
	want := []struct {
		typ  store.EventType
		key  string
		rev  int64
		prev int64
	}{{store.EventPut, "/x/1", 1, 0}, {store.EventPut, "/x/2", 3, 0}, {store.EventDelete, "/x/1", 4, 1}}
	for i, w := range want {
		ev := ch.Events[i]
		if ev.Type != w.typ || ev.KV.Key != w.key || ev.Revision() != w.rev || ev.PrevRevision != w.prev {
			t.Errorf("event %d = %+v, want %+v", i, ev, w)
		}
	}
	if string(ch.Events[1].KV.Value) != "c" || ch.Events[2].KV.Value != nil {
		t.Errorf("event values = %q, %q", ch.Events[1].KV.Value, ch.Events[2].KV.Value)
	}
	ch, err = s.Changes(ctx, 2, "", 2)
	if err != nil || ch.Through != 3 || len(ch.Events) != 2 || ch.Events[0].Revision() != 2 {
		t.Fatalf("Changes(2, limit 2) = %+v, %v", ch, err)
	}
	ch, err = s.Changes(ctx, 5, "", 10)
	if err != nil || ch.Through != 4 || len(ch.Events) != 0 {
		t.Fatalf("Changes past the end = %+v, %v", ch, err)
	}
}

func testCompact(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustPut(t, s, "/k/old", "1")  // 1: never written again
	mustPut(t, s, "/k/a", "2")    // 2
	mustPut(t, s, "/k/a", "3")    // 3
	mustPut(t, s, "/k/gone", "4") // 4
	mustDelete(t, s, "/k/gone")   // 5
	mustPut(t, s, "/k/a", "6")    // 6
	mustPut(t, s, "/k/back", "7") // 7
	mustDelete(t, s, "/k/back")   // 8
	mustPut(t, s, "/k/back", "9") // 9
	if err := s.Compact(ctx, 5); err != nil {
		t.Fatal(err)
	}
	st, err := s.Status(ctx)
	if err != nil || st.CompactRevision != 5 || st.Revision != 9 {
		t.Fatalf("Status after compact = %+v, %v", st, err)
	}
	_, _, err = s.Get(ctx, "/k/a", 4)
	var compacted *store.CompactedError
	if !errors.As(err, &compacted) || compacted.CompactRevision != 5 || compacted.Revision != 9 {
		t.Fatalf("Get at compacted revision: %v", err)
	}
	for _, c := range []struct {
		key  string
		rev  int64
		want string // "" means not found
	}{
		{"/k/old", 5, "1"}, {"/k/old", 9, "1"},
		{"/k/a", 5, "3"}, {"/k/a", 6, "6"},
		{"/k/gone", 5, ""}, {"/k/gone", 9, ""},
		{"/k/back", 7, "7"}, {"/k/back", 8, ""}, {"/k/back", 9, "9"},
	} {
		kv, _, err := s.Get(ctx, c.key, c.rev)
		switch {
		case c.want == "" && !errors.Is(err, store.ErrNotFound):
			t.Errorf("Get(%s, %d) = %q, %v; want not found", c.key, c.rev, kv.Value, err)
		case c.want != "" && (err != nil || string(kv.Value) != c.want):
			t.Errorf("Get(%s, %d) = %q, %v; want %q", c.key, c.rev, kv.Value, err, c.want)
		}
	}
	page, err := s.List(ctx, "/k/", 5, "", 10)
	if err != nil || keyValues(page.KVs) != "/k/a=3 /k/old=1" {
		t.Fatalf("List at compact revision = %q, %v", keyValues(page.KVs), err)
	}
	if _, err := s.Changes(ctx, 5, "", 10); !errors.Is(err, store.ErrCompacted) {
		t.Fatalf("Changes(5) after compacting to 5: %v", err)
	}
	ch, err := s.Changes(ctx, 6, "", 10)
	if err != nil || len(ch.Events) != 4 || ch.Events[0].Revision() != 6 {
		t.Fatalf("Changes(6) = %+v, %v", ch, err)
	}
	// Compacting again, past the kept entries, still answers reads.
	if err := s.Compact(ctx, 9); err != nil {
		t.Fatal(err)
	}
	page, err = s.List(ctx, "/k/", 9, "", 10)
	if err != nil || keyValues(page.KVs) != "/k/a=6 /k/back=9 /k/old=1" {
		t.Fatalf("List at compact revision 9 = %q, %v", keyValues(page.KVs), err)
	}
	if err := s.Compact(ctx, 3); err != nil {
		t.Fatalf("Compact below the compact revision: %v", err)
	}
	if err := s.Compact(ctx, 10); !errors.Is(err, store.ErrFutureRevision) {
		t.Fatalf("Compact past the current revision: %v", err)
	}
}

func testSubscribe(t *testing.T, s store.Store) {
	var mu sync.Mutex
	var seen []int64
	unsubscribe := s.Subscribe(func(events []store.Event) {
		mu.Lock()
		defer mu.Unlock()
		for _, ev := range events {
			seen = append(seen, ev.Revision())
		}
	})
	for i := 1; i <= 3; i++ {
		rev := mustPut(t, s, "/s", fmt.Sprint(i))
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if int64(n) != rev {
			t.Fatalf("after put %d returned, subscriber had seen %d events", rev, n)
		}
	}
	if _, err := s.Put(context.Background(), store.Put{Key: "/s", ExpectModRevision: ptr(1)}); err == nil {
		t.Fatal("CAS mismatch succeeded")
	}
	unsubscribe()
	mustPut(t, s, "/s", "after")
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(seen, []int64{1, 2, 3}) {
		t.Fatalf("subscriber saw %v, want [1 2 3]", seen)
	}
}

func testConcurrentWriters(t *testing.T, s store.Store) {
	const writers, each = 16, 40
	var wg sync.WaitGroup
	revs := make([][]int64, writers)
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				res, err := s.Put(context.Background(), store.Put{Key: fmt.Sprintf("/w/%d", w), Value: []byte(fmt.Sprint(i))})
				if err != nil {
					errs <- err
					return
				}
				revs[w] = append(revs[w], res.Revision)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var all []int64
	for _, r := range revs {
		if !slices.IsSorted(r) {
			t.Fatalf("one writer's revisions are not increasing: %v", r)
		}
		all = append(all, r...)
	}
	slices.Sort(all)
	for i, r := range all {
		if r != int64(i+1) {
			t.Fatalf("revisions are not 1..%d without gaps or repeats: position %d holds %d", writers*each, i, r)
		}
	}
	ch, err := s.Changes(context.Background(), 1, "", writers*each+1)
	if err != nil || len(ch.Events) != writers*each {
		t.Fatalf("change log holds %d events, %v; want %d", len(ch.Events), err, writers*each)
	}
	for w := range writers {
		kv, _, err := s.Get(context.Background(), fmt.Sprintf("/w/%d", w), 0)
		if err != nil || string(kv.Value) != fmt.Sprint(each-1) || kv.Version != each {
			t.Fatalf("/w/%d = %+v, %v", w, kv, err)
		}
	}
}

// testMatchesModel runs random puts, deletes and compactions and checks every
// read at every retained revision against an in-memory model.
func testMatchesModel(t *testing.T, s store.Store) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	var history []map[string]string // history[r] is the key space at revision r
	history = append(history, map[string]string{})
	keysPool := []string{"/m/a", "/m/b", "/m/b/c", "/m/d", "/n"}
	var compact int64
	steps := 300
	if testing.Short() {
		steps = 100
	}
	for step := range steps {
		cur := history[len(history)-1]
		key := keysPool[rng.IntN(len(keysPool))]
		switch op := rng.IntN(10); {
		case op < 6:
			v := fmt.Sprintf("v%d", step)
			mustPut(t, s, key, v)
			next := clone(cur)
			next[key] = v
			history = append(history, next)
		case op < 8:
			_, err := s.Delete(ctx, store.Delete{Key: key})
			if _, ok := cur[key]; !ok {
				if !errors.Is(err, store.ErrNotFound) {
					t.Fatalf("delete of absent %s: %v", key, err)
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			next := clone(cur)
			delete(next, key)
			history = append(history, next)
		default:
			rev := int64(len(history) - 1)
			if rev == 0 {
				continue
			}
			to := compact + rng.Int64N(rev-compact+1)
			if err := s.Compact(ctx, to); err != nil {
				t.Fatal(err)
			}
			compact = max(compact, to)
		}
		rev := int64(len(history) - 1)
		at := max(compact, 1) + rng.Int64N(max(rev-max(compact, 1)+1, 1))
		if rev == 0 {
			continue
		}
		page, err := s.List(ctx, "/", at, "", 100)
		if err != nil {
			t.Fatalf("step %d: List at %d: %v", step, at, err)
		}
		if got, want := keyValues(page.KVs), render(history[at]); got != want {
			t.Fatalf("step %d: List at %d (compact %d) = %q, want %q", step, at, compact, got, want)
		}
	}
}

func testTxn(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustPut(t, s, "/ptr", "gen-1") // 1
	var events []store.Event
	var mu sync.Mutex
	defer s.Subscribe(func(evs []store.Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, evs...)
	})()
	// A failed compare writes nothing.
	_, err := s.Txn(ctx, store.Txn{
		Compares: []store.Compare{{Key: "/ptr", ModRevision: 1}, {Key: "/receipt/k1", ModRevision: 5}},
		Puts:     []store.Put{{Key: "/ptr", Value: []byte("gen-2")}, {Key: "/receipt/k1", Value: []byte("r")}},
	})
	var mismatch *store.RevisionMismatchError
	if !errors.As(err, &mismatch) || mismatch.Key != "/receipt/k1" {
		t.Fatalf("Txn with a failing compare = %v", err)
	}
	if rev := revision(t, s); rev != 1 {
		t.Fatalf("a failed transaction moved the revision to %d", rev)
	}
	res, err := s.Txn(ctx, store.Txn{
		Compares: []store.Compare{{Key: "/ptr", ModRevision: 1}, {Key: "/receipt/k1", ModRevision: 0}},
		Puts:     []store.Put{{Key: "/receipt/k1", Value: []byte("r")}, {Key: "/ptr", Value: []byte("gen-2"), ExpectModRevision: ptr(99)}},
	})
	if err != nil || res.Revision != 3 {
		t.Fatalf("Txn = %+v, %v; want revision 3", res, err)
	}
	if kv, _, err := s.Get(ctx, "/ptr", 0); err != nil || string(kv.Value) != "gen-2" || kv.ModRevision != 3 {
		t.Fatalf("/ptr after Txn = %+v, %v", kv, err)
	}
	if kv, _, err := s.Get(ctx, "/receipt/k1", 0); err != nil || kv.ModRevision != 2 {
		t.Fatalf("/receipt/k1 after Txn = %+v, %v", kv, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 2 || events[0].Revision() != 2 || events[1].Revision() != 3 {
		t.Fatalf("subscriber saw %+v", events)
	}
	if _, err := s.Txn(ctx, store.Txn{}); err == nil {
		t.Fatal("an empty transaction succeeded")
	}
}

// testConcurrentTxnOneWins races 50 transactions that all expect the same
// pointer revision: exactly one commits.
func testConcurrentTxnOneWins(t *testing.T, s store.Store) {
	ctx := context.Background()
	start := mustPut(t, s, "/ptr", "0")
	const racers = 50
	var wg sync.WaitGroup
	var mu sync.Mutex
	var wins []int
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.Txn(ctx, store.Txn{
				Compares: []store.Compare{{Key: "/ptr", ModRevision: start}},
				Puts:     []store.Put{{Key: fmt.Sprintf("/receipt/%d", i), Value: []byte("r")}, {Key: "/ptr", Value: []byte(fmt.Sprint(i))}},
			})
			switch {
			case err == nil:
				mu.Lock()
				wins = append(wins, i)
				mu.Unlock()
			case !errors.Is(err, store.ErrRevisionMismatch):
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if len(wins) != 1 {
		t.Fatalf("%d transactions won: %v", len(wins), wins)
	}
	page, err := s.List(ctx, "/receipt/", 0, "", 100)
	if err != nil || len(page.KVs) != 1 || page.KVs[0].Key != fmt.Sprintf("/receipt/%d", wins[0]) {
		t.Fatalf("receipts = %+v, %v", page.KVs, err)
	}
	if kv, _, _ := s.Get(ctx, "/ptr", 0); string(kv.Value) != fmt.Sprint(wins[0]) {
		t.Fatalf("pointer = %q, winner %d", kv.Value, wins[0])
	}
}

// testTxnUnchanged: a transaction conditioned on a prefix being unchanged
// since a revision commits only if no key under it was put, created or
// deleted after that revision, and fails when the log cannot tell.
func testTxnUnchanged(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustPut(t, s, "/acks/1/a", "x")      // 1
	read := mustPut(t, s, "/other", "x") // 2
	commit := func(prefix string, since int64) error {
		_, err := s.Txn(ctx, store.Txn{
			Unchanged: []store.Unchanged{{Prefix: prefix, Since: since}},
			Puts:      []store.Put{{Key: "/ptr", Value: []byte("p")}},
		})
		return err
	}
	if err := commit("/acks/1/", read); err != nil {
		t.Fatalf("nothing under /acks/1/ changed after %d: %v", read, err)
	}
	created := mustPut(t, s, "/acks/1/b", "y") // a key that did not exist when read
	err := commit("/acks/1/", read)
	var changed *store.ChangedError
	if !errors.As(err, &changed) || !errors.Is(err, store.ErrRevisionMismatch) || changed.Key != "/acks/1/b" || changed.Revision != created {
		t.Fatalf("commit after a new key under the prefix = %v", err)
	}
	before := revision(t, s)
	if err := commit("/acks/2/", read); err != nil {
		t.Fatalf("a change under another prefix failed the condition: %v", err)
	}
	if err := commit("/acks/1/", before); err != nil {
		t.Fatalf("read after the change, nothing since: %v", err)
	}
	at := revision(t, s)
	deleted := mustDelete(t, s, "/acks/1/a")
	if err := commit("/acks/1/", at); !errors.As(err, &changed) || changed.Revision != deleted {
		t.Fatalf("commit after a delete under the prefix = %v", err)
	}
	// A failed condition writes nothing.
	if rev := revision(t, s); rev != deleted {
		t.Fatalf("a failed transaction moved the revision from %d to %d", deleted, rev)
	}
	// Several conditions: the one that fails is reported.
	_, err = s.Txn(ctx, store.Txn{
		Unchanged: []store.Unchanged{{Prefix: "/other", Since: read}, {Prefix: "/acks/", Since: deleted}},
		Puts:      []store.Put{{Key: "/ptr", Value: []byte("p")}},
	})
	if err != nil {
		t.Fatalf("both conditions hold: %v", err)
	}
	mustPut(t, s, "/other", "z")
	if err := commit("/other", deleted); !errors.As(err, &changed) || changed.Key != "/other" {
		t.Fatalf("commit after /other changed = %v", err)
	}
	// After compaction, changes before the compact revision cannot be
	// checked: the condition fails rather than guess.
	now := revision(t, s)
	if err := s.Compact(ctx, now); err != nil {
		t.Fatal(err)
	}
	if err := commit("/nothing/", read); !errors.As(err, &changed) || changed.Key != "" {
		t.Fatalf("commit with a compacted since = %v", err)
	}
	if err := commit("/nothing/", now); err != nil {
		t.Fatalf("commit since the compact revision = %v", err)
	}
}

// testEachAtIsOneSnapshot lists more than a page while keys are written in
// the middle of the listing: no page sees them.
func testEachAtIsOneSnapshot(t *testing.T, s store.Store) {
	ctx := context.Background()
	const n = 2500
	for i := range n {
		mustPut(t, s, fmt.Sprintf("/reg/%05d", i*2), "old")
	}
	seen := map[string]string{}
	rev, err := store.EachAt(ctx, s, "/reg/", 0, func(kv store.KeyValue) error {
		if len(seen) == 0 {
			// While the first page is being read: a key that sorts in a
			// later page appears, and one of a later page changes.
			mustPut(t, s, fmt.Sprintf("/reg/%05d", 2*n-3), "new")
			mustPut(t, s, fmt.Sprintf("/reg/%05d", 2*n-2), "new")
		}
		seen[kv.Key] = string(kv.Value)
		return nil
	})
	if err != nil || rev != n {
		t.Fatalf("EachAt = revision %d, %v; want %d", rev, err, n)
	}
	if len(seen) != n {
		t.Fatalf("EachAt saw %d keys, want %d", len(seen), n)
	}
	for k, v := range seen {
		if v != "old" {
			t.Fatalf("EachAt saw %s = %q, written after its revision", k, v)
		}
	}
}

func testBlobs(t *testing.T, s store.Store) {
	ctx := context.Background()
	if _, err := s.GetBlob(ctx, "v", "a", false); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetBlob of nothing: %v", err)
	}
	for _, id := range []string{"b", "a", "c"} {
		created, err := s.PutBlob(ctx, "v", store.Blob{ID: id, Meta: []byte("meta-" + id), Data: []byte("data-" + id)})
		if err != nil || !created {
			t.Fatalf("PutBlob(%s) = %v, %v", id, created, err)
		}
	}
	created, err := s.PutBlob(ctx, "v", store.Blob{ID: "a", Meta: []byte("other"), Data: []byte("other")})
	if err != nil || created {
		t.Fatalf("second PutBlob(a) = %v, %v; want no change", created, err)
	}
	b, err := s.GetBlob(ctx, "v", "a", true)
	if err != nil || string(b.Meta) != "meta-a" || string(b.Data) != "data-a" {
		t.Fatalf("GetBlob(a) = %+v, %v", b, err)
	}
	if b, _ := s.GetBlob(ctx, "v", "a", false); b.Data != nil {
		t.Fatalf("GetBlob without data returned data")
	}
	list, more, err := s.ListBlobs(ctx, "v", "", 2)
	if err != nil || len(list) != 2 || list[0].ID != "a" || list[1].ID != "b" || !more {
		t.Fatalf("ListBlobs page 1 = %+v, %v, %v", list, more, err)
	}
	list, more, err = s.ListBlobs(ctx, "v", "b", 2)
	if err != nil || len(list) != 1 || list[0].ID != "c" || more {
		t.Fatalf("ListBlobs page 2 = %+v, %v, %v", list, more, err)
	}
	if list, _, _ := s.ListBlobs(ctx, "other-kind", "", 10); len(list) != 0 {
		t.Fatalf("kinds are not separate: %+v", list)
	}
	if st, _ := s.Status(ctx); st.Revision != 0 {
		t.Fatalf("blobs took revisions: %d", st.Revision)
	}
}

// testRecords: records beside the key space are replaced by ID, listed in
// ID order by pages, and take no revision and no event.
func testRecords(t *testing.T, s store.Store) {
	ctx := context.Background()
	events := 0
	var mu sync.Mutex
	defer s.Subscribe(func(evs []store.Event) {
		mu.Lock()
		defer mu.Unlock()
		events += len(evs)
	})()
	put := func(recs ...store.Record) {
		t.Helper()
		if err := s.PutRecords(ctx, "leases", recs); err != nil {
			t.Fatal(err)
		}
	}
	put(store.Record{ID: "b", Value: []byte("1")}, store.Record{ID: "a", Value: []byte("1")}, store.Record{ID: "c", Value: []byte("1")})
	put(store.Record{ID: "b", Value: []byte("2")})
	put()
	list := func(after string, limit int) string {
		t.Helper()
		recs, more, err := s.ListRecords(ctx, "leases", after, limit)
		if err != nil {
			t.Fatal(err)
		}
		var parts []string
		for _, r := range recs {
			parts = append(parts, r.ID+"="+string(r.Value))
		}
		return fmt.Sprintf("%s more=%v", strings.Join(parts, ","), more)
	}
	if got := list("", 10); got != "a=1,b=2,c=1 more=false" {
		t.Fatalf("ListRecords = %s", got)
	}
	if got := list("", 2); got != "a=1,b=2 more=true" {
		t.Fatalf("first page = %s", got)
	}
	if got := list("b", 2); got != "c=1 more=false" {
		t.Fatalf("after b = %s", got)
	}
	if got := list("", 10); got == "" {
		t.Fatal("no records")
	}
	if recs, _, err := s.ListRecords(ctx, "other", "", 10); err != nil || len(recs) != 0 {
		t.Fatalf("another kind = %v, %v", recs, err)
	}
	if rev := revision(t, s); rev != 0 {
		t.Fatalf("records moved the revision to %d", rev)
	}
	mu.Lock()
	defer mu.Unlock()
	if events != 0 {
		t.Fatalf("records made %d events", events)
	}
}

func testClosed(t *testing.T, s store.Store) {
	mustPut(t, s, "/c", "1")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	ctx := context.Background()
	if _, err := s.Put(ctx, store.Put{Key: "/c"}); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Put after Close: %v", err)
	}
	if _, _, err := s.Get(ctx, "/c", 0); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
}

func clone(m map[string]string) map[string]string {
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func render(m map[string]string) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var b strings.Builder
	for i, k := range ks {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k + "=" + m[k])
	}
	return b.String()
}

func keys(kvs []store.KeyValue) string {
	ks := make([]string, len(kvs))
	for i, kv := range kvs {
		ks[i] = kv.Key
	}
	return strings.Join(ks, " ")
}

func keyValues(kvs []store.KeyValue) string {
	ks := make([]string, len(kvs))
	for i, kv := range kvs {
		ks[i] = kv.Key + "=" + string(kv.Value)
	}
	return strings.Join(ks, " ")
}

func equalKV(a, b store.KeyValue) bool {
	return a.Key == b.Key && bytes.Equal(a.Value, b.Value) && a.CreateRevision == b.CreateRevision &&
		a.ModRevision == b.ModRevision && a.Version == b.Version
}

// testRevisionAt: the last revision committed at or before a time, the
// compact revision before the first retained one.
func testRevisionAt(t *testing.T, s store.Store) {
	ctx := context.Background()
	before := time.Now().Add(-time.Second)
	if got, err := s.RevisionAt(ctx, before); err != nil || got != 0 {
		t.Fatalf("RevisionAt on an empty store = %d, %v", got, err)
	}
	for i := range 5 {
		mustPut(t, s, fmt.Sprintf("/at/%d", i), "v")
	}
	after := time.Now().Add(time.Second)
	if got, err := s.RevisionAt(ctx, before); err != nil || got != 0 {
		t.Fatalf("RevisionAt(before every write) = %d, %v; want 0", got, err)
	}
	if got, err := s.RevisionAt(ctx, after); err != nil || got != 5 {
		t.Fatalf("RevisionAt(after every write) = %d, %v; want 5", got, err)
	}
	if err := s.Compact(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if got, err := s.RevisionAt(ctx, before); err != nil || got != 3 {
		t.Fatalf("RevisionAt(before every write) after compacting to 3 = %d, %v; want 3", got, err)
	}
}

// testTxnDeliveredWhole: a subscriber gets the puts of one transaction in
// one batch, even a transaction larger than any engine's read batch.
func testTxnDeliveredWhole(t *testing.T, s store.Store) {
	var mu sync.Mutex
	var batches [][]store.Event
	defer s.Subscribe(func(evs []store.Event) {
		mu.Lock()
		defer mu.Unlock()
		batches = append(batches, evs)
	})()
	mustPut(t, s, "/w/first", "v")
	var txn store.Txn
	for i := range 1500 {
		txn.Puts = append(txn.Puts, store.Put{Key: fmt.Sprintf("/w/%04d", i), Value: []byte("v")})
	}
	res, err := s.Txn(context.Background(), txn)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, "/w/last", "v")
	mu.Lock()
	defer mu.Unlock()
	var found bool
	var next int64 = 1
	for _, b := range batches {
		for _, ev := range b {
			if ev.Revision() != next {
				t.Fatalf("revision %d delivered where %d was next", ev.Revision(), next)
			}
			next++
		}
		if b[len(b)-1].Revision() == res.Revision {
			if b[0].Revision() != res.Revision-1499 {
				t.Fatalf("the transaction's batch starts at %d, want %d", b[0].Revision(), res.Revision-1499)
			}
			found = true
		}
	}
	if !found || next != res.Revision+2 {
		t.Fatalf("transaction through %d not delivered whole (next %d, %d batches)", res.Revision, next, len(batches))
	}
}

// SharedOpener returns two handles on one new, empty backend: what two
// servers sharing it see. RunShared closes them.
type SharedOpener func(t *testing.T) (a, b store.Store)

// RunShared runs the conformance tests of engines that several servers
// share: every write made through one handle reaches the other's
// subscribers, in order, and reads and compares agree across handles.
func RunShared(t *testing.T, open SharedOpener) {
	tests := []struct {
		name string
		fn   func(t *testing.T, a, b store.Store)
	}{
		{"WritesReachTheOtherHandle", testSharedWrites},
		{"CompareAcrossHandles", testSharedCompare},
		{"BlobsAndRecordsShared", testSharedBeside},
		{"LeaseHasOneHolder", testSharedLease},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := open(t)
			t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
			tt.fn(t, a, b)
		})
	}
}

// collector records the revisions a subscriber saw and lets a test wait
// for one.
type collector struct {
	mu   sync.Mutex
	revs []int64
	got  chan struct{}
}

func collect(s store.Store) (*collector, func()) {
	c := &collector{got: make(chan struct{}, 1)}
	stop := s.Subscribe(func(evs []store.Event) {
		c.mu.Lock()
		for _, ev := range evs {
			c.revs = append(c.revs, ev.Revision())
		}
		c.mu.Unlock()
		select {
		case c.got <- struct{}{}:
		default:
		}
	})
	return c, stop
}

func (c *collector) waitFor(t *testing.T, rev int64) []int64 {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		if n := len(c.revs); n > 0 && c.revs[n-1] >= rev {
			out := slices.Clone(c.revs)
			c.mu.Unlock()
			return out
		}
		c.mu.Unlock()
		select {
		case <-c.got:
		case <-deadline:
			t.Fatalf("revision %d never delivered; saw %v", rev, c.revs)
		}
	}
}

func testSharedWrites(t *testing.T, a, b store.Store) {
	ca, stopA := collect(a)
	defer stopA()
	cb, stopB := collect(b)
	defer stopB()
	const writers, each = 4, 50
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := a
			if w%2 == 1 {
				s = b
			}
			for i := range each {
				if _, err := s.Put(context.Background(), store.Put{Key: fmt.Sprintf("/sh/%d", w), Value: []byte(fmt.Sprint(i))}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	const last = writers * each
	want := make([]int64, last)
	for i := range want {
		want[i] = int64(i + 1)
	}
	for name, c := range map[string]*collector{"a": ca, "b": cb} {
		if got := c.waitFor(t, last); !slices.Equal(got, want) {
			t.Fatalf("handle %s saw %v, want 1..%d once each in order", name, got, last)
		}
	}
	kv, _, err := b.Get(context.Background(), "/sh/0", 0)
	if err != nil || string(kv.Value) != fmt.Sprint(each-1) {
		t.Fatalf("b reads a's last write as %+v, %v", kv, err)
	}
}

func testSharedCompare(t *testing.T, a, b store.Store) {
	ctx := context.Background()
	res := mustPut(t, a, "/cas", "a")
	if _, err := b.Put(ctx, store.Put{Key: "/cas", Value: []byte("b"), ExpectModRevision: ptr(res)}); err != nil {
		t.Fatalf("b's CAS on a's revision: %v", err)
	}
	if _, err := a.Put(ctx, store.Put{Key: "/cas", Value: []byte("a2"), ExpectModRevision: ptr(res)}); !errors.Is(err, store.ErrRevisionMismatch) {
		t.Fatalf("a's stale CAS = %v, want a mismatch", err)
	}
	if err := b.Compact(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if st, err := a.Status(ctx); err != nil || st.CompactRevision != 1 || st.Revision != 2 {
		t.Fatalf("a's status after b compacted = %+v, %v", st, err)
	}
}

func testSharedBeside(t *testing.T, a, b store.Store) {
	ctx := context.Background()
	if created, err := a.PutBlob(ctx, "k", store.Blob{ID: "x", Data: []byte("one")}); err != nil || !created {
		t.Fatalf("PutBlob = %v, %v", created, err)
	}
	if created, err := b.PutBlob(ctx, "k", store.Blob{ID: "x", Data: []byte("two")}); err != nil || created {
		t.Fatalf("second PutBlob through b = %v, %v; want not created", created, err)
	}
	if blob, err := b.GetBlob(ctx, "k", "x", true); err != nil || string(blob.Data) != "one" {
		t.Fatalf("b reads %+v, %v", blob, err)
	}
	if err := a.PutRecords(ctx, "r", []store.Record{{ID: "1", Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	if recs, _, err := b.ListRecords(ctx, "r", "", 10); err != nil || len(recs) != 1 {
		t.Fatalf("b lists %v, %v", recs, err)
	}
	// A shared engine drops expired records.
	if err := a.PutRecords(ctx, "r", []store.Record{{ID: "2", Value: []byte("v"), ExpiresAt: time.Now().Add(-time.Second)}}); err != nil {
		t.Fatal(err)
	}
	if recs, _, err := b.ListRecords(ctx, "r", "", 10); err != nil || len(recs) != 1 || recs[0].ID != "1" {
		t.Fatalf("b lists %v, %v; want the expired record gone", recs, err)
	}
}

func testSharedLease(t *testing.T, a, b store.Store) {
	la, ok := a.(store.Leaser)
	if !ok {
		t.Fatal("a shared engine must implement store.Leaser")
	}
	lb := b.(store.Leaser)
	ctx := context.Background()
	ta, held, err := la.AcquireLease(ctx, "work", "a", time.Minute)
	if err != nil || !held {
		t.Fatalf("a's AcquireLease = %v, %v", held, err)
	}
	if _, held, err := lb.AcquireLease(ctx, "work", "b", time.Minute); err != nil || held {
		t.Fatalf("b took a held lease: %v, %v", held, err)
	}
	if again, held, err := la.AcquireLease(ctx, "work", "a", time.Minute); err != nil || !held || again != ta {
		t.Fatalf("a's renewal = %d, %v, %v; want token %d", again, held, err, ta)
	}
	fenceA := store.WithFence(ctx, store.Fence{Lease: "work", Token: ta})
	if _, err := a.Put(fenceA, store.Put{Key: "/fenced", Value: []byte("a")}); err != nil {
		t.Fatalf("a's fenced write while it holds the lease: %v", err)
	}
	if err := la.ReleaseLease(ctx, "work", "a"); err != nil {
		t.Fatal(err)
	}
	tb, held, err := lb.AcquireLease(ctx, "work", "b", time.Minute)
	if err != nil || !held || tb <= ta {
		t.Fatalf("b's AcquireLease after release = %d, %v, %v; want a token above %d", tb, held, err, ta)
	}
	if _, err := a.Put(fenceA, store.Put{Key: "/fenced", Value: []byte("late")}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("a's fenced write after losing the lease = %v, want ErrFenced", err)
	}
	if err := a.Compact(fenceA, 1); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("a's fenced compaction after losing the lease = %v, want ErrFenced", err)
	}
	if kv, _, err := b.Get(ctx, "/fenced", 0); err != nil || string(kv.Value) != "a" {
		t.Fatalf("/fenced = %+v, %v; the fenced write must change nothing", kv, err)
	}
}

// testTxnPutsAndDeletes: a transaction puts and deletes together, skips
// the deletes of absent keys, marks every change but its last with More,
// and Changes never stops inside it.
func testTxnPutsAndDeletes(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustPut(t, s, "/t/old1", "v")
	mustPut(t, s, "/t/old2", "v")
	res, err := s.Txn(ctx, store.Txn{
		Compares: []store.Compare{{Key: "/t/old1", ModRevision: 1}},
		Puts:     []store.Put{{Key: "/t/new", Value: []byte("n")}, {Key: "/t/old2", Value: []byte("w")}},
		Deletes:  []string{"/t/absent", "/t/old1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Revision != 5 {
		t.Fatalf("the transaction ended at revision %d, want 5 (two puts and one delete after revision 2)", res.Revision)
	}
	if _, _, err := s.Get(ctx, "/t/old1", 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("/t/old1 after its delete: %v", err)
	}
	ch, err := s.Changes(ctx, 3, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range ch.Events {
		got = append(got, fmt.Sprintf("%s %s %d more=%v", ev.Type, ev.KV.Key, ev.Revision(), ev.More))
	}
	want := []string{"PUT /t/new 3 more=true", "PUT /t/old2 4 more=true", "DELETE /t/old1 5 more=false"}
	if !slices.Equal(got, want) || ch.Through != 5 {
		t.Fatalf("Changes(3, limit 1) = %v through %d; want the whole transaction %v through 5", got, ch.Through, want)
	}
	// Only absent deletes: nothing changes, no revision is taken.
	res, err = s.Txn(ctx, store.Txn{Deletes: []string{"/t/absent"}})
	if err != nil || res.Revision != 5 {
		t.Fatalf("a transaction of absent deletes = %+v, %v; want revision 5", res, err)
	}
	if rev := revision(t, s); rev != 5 {
		t.Fatalf("revision %d after a transaction that changed nothing", rev)
	}
	// A failed compare changes nothing.
	if _, err := s.Txn(ctx, store.Txn{Compares: []store.Compare{{Key: "/t/new", ModRevision: 1}}, Deletes: []string{"/t/new"}}); !errors.Is(err, store.ErrRevisionMismatch) {
		t.Fatalf("a transaction with a failing compare = %v", err)
	}
	if _, _, err := s.Get(ctx, "/t/new", 0); err != nil {
		t.Fatalf("/t/new after a failed transaction: %v", err)
	}
}
