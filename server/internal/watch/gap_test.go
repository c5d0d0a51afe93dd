package watch_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pawlcfg/pawl/server/internal/store"
	"github.com/pawlcfg/pawl/server/internal/store/boltstore"
	"github.com/pawlcfg/pawl/server/internal/watch"
)

// lossyFeed is a Source whose commit feed loses the batches drop says to
// lose, as a shared store's pub/sub loses messages: the store commits them,
// the hub never hears of them.
type lossyFeed struct {
	*boltstore.Store
	mu   sync.Mutex
	drop func(events []store.Event) bool
	lost int
}

func (f *lossyFeed) Subscribe(fn store.CommitFunc) func() {
	return f.Store.Subscribe(func(events []store.Event) {
		f.mu.Lock()
		lose := f.drop != nil && f.drop(events)
		if lose {
			f.lost += len(events)
		}
		f.mu.Unlock()
		if !lose {
			fn(events)
		}
	})
}

// TestRevisionGapInFeedIsRepairedFromTheLog loses two commits under /a on
// the way to the hub; the next commit, under /b, reveals the gap. The /a
// watcher must get the lost events from the change log at once (not at the
// next progress tick), in order, without a duplicate.
func TestRevisionGapInFeedIsRepairedFromTheLog(t *testing.T) {
	st, err := boltstore.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	feed := &lossyFeed{Store: st}
	// Progress far away: only the gap repair can wake the watcher in time.
	hub, err := watch.New(context.Background(), feed, watch.WithProgressInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		hub.Close()
		_ = st.Close()
	})
	a := watchFrom(t, hub, "/a/", 0)
	put(t, st, "/a/k", "1")
	expectConsecutive(t, collect(t, a, 1), 1)
	// The watcher waits in Next before anything is lost: the repair must
	// wake it, since no delivered event is under its prefix.
	got := make(chan []int64, 1)
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		b, err := a.Next(ctx)
		if err != nil {
			errc <- err
			return
		}
		got <- revisions(b.Events)
	}()
	feed.mu.Lock()
	feed.drop = func(events []store.Event) bool { return events[0].KV.Key == "/a/k" }
	feed.mu.Unlock()
	put(t, st, "/a/k", "2")
	put(t, st, "/a/k", "3")
	feed.mu.Lock()
	feed.drop = nil
	lost := feed.lost
	feed.mu.Unlock()
	before := hub.Stats().LogCatchUps
	put(t, st, "/b/k", "4") // delivered: the hub sees 4 after 1
	if lost != 2 {
		t.Fatalf("the feed lost %d events, want 2", lost)
	}
	select {
	case err := <-errc:
		t.Fatalf("the /a watcher was not woken by the gap: %v", err)
	case revs := <-got:
		if len(revs) != 2 || revs[0] != 2 || revs[1] != 3 {
			t.Fatalf("after the gap the watcher got revisions %v, want [2 3]", revs)
		}
	}
	if hub.Stats().LogCatchUps == before {
		t.Fatal("the lost events did not come from the change log")
	}
	// Live again: the next /a event comes from the ring.
	put(t, st, "/a/k", "5")
	if got := revisions(collect(t, a, 1)); got[0] != 5 {
		t.Fatalf("after the repair the watcher got %v, want [5]", got)
	}
}

// TestAQuietWatcherIsNotBehind: a watcher whose prefix sees no event while
// hundreds pass under another prefix (far more than the ring holds and
// the change log keeps) is not behind: its next event arrives as the next
// event, not as a compaction notice. After a gap in the feed the hub no
// longer knows what passed, and reads the log.
func TestAQuietWatcherIsNotBehind(t *testing.T) {
	st, hub := newHub(t, nil, watch.WithRingEvents(8), watch.WithProgressInterval(time.Hour))
	quiet := watchFrom(t, hub, "/quiet/", 0)
	busy := watchFrom(t, hub, "/busy/", 0)
	for i := range 200 {
		put(t, st, "/busy/k", fmt.Sprint(i))
		keep(t, st, 16)     // the change log keeps 16 revisions
		collect(t, busy, 1) // the busy watcher keeps up
	}
	rev := put(t, st, "/quiet/k", "x")
	got := collect(t, quiet, 1)
	if len(got) != 1 || got[0].Revision() != rev {
		t.Fatalf("quiet watcher got %v, want revision %d", revisions(got), rev)
	}
	if status, _ := st.Status(context.Background()); status.CompactRevision < 100 {
		t.Fatalf("the log was not compacted (compact revision %d): the test proves nothing", status.CompactRevision)
	}
}
