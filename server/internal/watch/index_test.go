package watch_test

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/pawlcfg/pawl/server/internal/store"
	"github.com/pawlcfg/pawl/server/internal/store/boltstore"
	"github.com/pawlcfg/pawl/server/internal/watch"
)

// revWatcher is a watcher of TestEveryWatcherGetsTheLogsEventsUnderItsPrefix
// and what it got.
type revWatcher struct {
	w       *watch.Watcher
	prefix  string
	start   int64 // first revision it may deliver
	got     []store.Event
	batches [][]store.Event
}

// TestEveryWatcherGetsTheLogsEventsUnderItsPrefix checks the hub against
// the change log (the ring's prefix index, its scan and the log's
// catch-up alike): random puts and transactions over nested prefixes, a
// small ring, a small batch limit, lost feed batches (gaps), watchers
// created at random times with random starts, polled partially; every
// watcher must get exactly the log's events under its prefix from its
// start, in order, and no two batches may split a transaction. 12 seeds
// (under the race detector, 40 took 36 s of the package's CI time).
func TestEveryWatcherGetsTheLogsEventsUnderItsPrefix(t *testing.T) {
	for seed := int64(1); seed <= 12; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { againstTheLog(t, seed) })
	}
}

// againstTheLog is one seed of
// TestEveryWatcherGetsTheLogsEventsUnderItsPrefix.
func againstTheLog(t *testing.T, seed int64) {
	rng := rand.New(rand.NewSource(seed))
	ctx := context.Background()
	st, err := boltstore.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dropNext := false
	feed := &lossyFeed{Store: st, drop: func([]store.Event) bool { return dropNext }}
	hub, err := watch.New(ctx, feed, watch.WithMaxBatch(1+rng.Intn(4)), watch.WithRingEvents(8+rng.Intn(24)), watch.WithProgressInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { hub.Close(); _ = st.Close() }()
	prefixes := []string{"/a/", "/a/b/", "/b/", "/"}
	keys := []string{"/a/x", "/a/b/y", "/a/b/z", "/b/q", "/c/r", "/c/s"}
	var ws []*revWatcher
	newWatcher := func() {
		p := prefixes[rng.Intn(len(prefixes))]
		stt, _ := st.Status(ctx)
		var start int64
		if rng.Intn(2) == 0 && stt.Revision > 0 {
			start = 1 + rng.Int63n(stt.Revision+1)
		}
		w, err := hub.Watch(ctx, p, start)
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, &revWatcher{w: w, prefix: p, start: w.StartedAt() + 1})
	}
	poll := func(rw *revWatcher, n int) {
		for i := 0; i < n; i++ {
			b, ok, err := rw.w.Poll(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				return
			}
			if len(b.Events) > 0 {
				rw.got = append(rw.got, b.Events...)
				rw.batches = append(rw.batches, b.Events)
			}
		}
	}
	for step := 0; step < 300; step++ {
		switch r := rng.Intn(20); {
		case r < 2:
			newWatcher()
		case r < 4 && len(ws) > 0:
			poll(ws[rng.Intn(len(ws))], 1+rng.Intn(3))
		case r < 5 && len(ws) > 0:
			i := rng.Intn(len(ws))
			poll(ws[i], 1000)
		default:
			dropNext = rng.Intn(15) == 0
			if rng.Intn(4) == 0 {
				var txn store.Txn
				for n := 1 + rng.Intn([]int{6, 40}[rng.Intn(2)]); n > 0; n-- {
					txn.Puts = append(txn.Puts, store.Put{Key: keys[rng.Intn(len(keys))] + fmt.Sprint(rng.Intn(100)), Value: []byte("v")})
				}
				if _, err := st.Txn(ctx, txn); err != nil {
					t.Fatal(err)
				}
			} else {
				put(t, st, keys[rng.Intn(len(keys))], fmt.Sprint(step))
			}
			dropNext = false
		}
	}
	put(t, st, "/z", "last") // reveals any gap
	if seed%20 == 0 {
		t.Logf("lost %d events, %d watchers", feed.lost, len(ws))
	}
	all, err := st.Changes(ctx, 1, "", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	txnOf := map[int64]int{}
	id := 0
	for i, ev := range all.Events {
		if i == 0 || !all.Events[i-1].More {
			id++
		}
		txnOf[ev.Revision()] = id
	}
	for wi, rw := range ws {
		poll(rw, 100000)
		var want []int64
		for _, ev := range all.Events {
			if ev.Revision() >= rw.start && strings.HasPrefix(ev.KV.Key, rw.prefix) {
				want = append(want, ev.Revision())
			}
		}
		var got []int64
		for _, ev := range rw.got {
			got = append(got, ev.Revision())
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("watcher %d of %q from %d:\n got %v\nwant %v", wi, rw.prefix, rw.start, got, want)
		}
		for bi := 1; bi < len(rw.batches); bi++ {
			prev, cur := rw.batches[bi-1], rw.batches[bi]
			if txnOf[prev[len(prev)-1].Revision()] == txnOf[cur[0].Revision()] {
				t.Fatalf("watcher %d of %q: batches %d and %d split transaction at %d/%d", wi, rw.prefix, bi-1, bi, prev[len(prev)-1].Revision(), cur[0].Revision())
			}
		}
		rw.w.Close()
	}
}
