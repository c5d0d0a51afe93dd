package api

import (
	"context"
	"fmt"
	"slices"
	"testing"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/server/internal/store"
	"github.com/pawlcfg/pawl/server/internal/store/boltstore"
	"github.com/pawlcfg/pawl/server/internal/watch"
)

// TestASharedMessageNeverMovesAWatchsEventsAhead: a session's writer, on
// a real store and hub with batches of at most two events, drains in one
// message watch 1 (/p/a/), whose first batch is revisions 3-4, then
// watch 2 (/p/), whose batches are 1-2 and then 3-4, then watch 3
// (/p/a/ again). Watch 2's 3-4 must not join watch 1's message, which
// comes before its 1-2; watch 3's may join watch 2's. Handed out as a
// client does (each message to watch_id and to each of shared_with, in
// list order), every watch gets its events in order.
func TestASharedMessageNeverMovesAWatchsEventsAhead(t *testing.T) {
	ctx := context.Background()
	st, err := boltstore.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	hub, err := watch.New(ctx, st, watch.WithMaxBatch(2))
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close()
	for _, k := range []string{"/p/b/1", "/p/b/2", "/p/a/1", "/p/a/2"} {
		if _, err := st.Put(ctx, store.Put{Key: k, Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	s := &session{ctx: ctx, group: hub.NewGroup(), watches: map[int64]*sessionWatch{}, byW: map[*watch.Watcher]*sessionWatch{}, share: newEventShare()}
	for _, w := range []struct {
		id     int64
		prefix string
	}{{1, "/p/a/"}, {2, "/p/"}, {3, "/p/a/"}} {
		defer watchOn(t, s, w.id, w.prefix, 1).w.Close() // ready at once, in this order
	}
	msg := &pawlv1.SessionResponse{}
	if _, err := s.fill(msg); err != nil {
		t.Fatal(err)
	}
	got := map[int64][]int64{}
	shared := 0
	for _, m := range msg.GetWatches() {
		shared += len(m.GetSharedWith())
		for _, id := range append([]int64{m.GetWatchId()}, m.GetSharedWith()...) {
			for _, ev := range m.GetResponse().GetEvents().GetEvents() {
				got[id] = append(got[id], ev.GetKv().GetModRevision())
			}
		}
	}
	want := map[int64][]int64{1: {3, 4}, 2: {1, 2, 3, 4}, 3: {3, 4}}
	for id, revs := range want {
		if !slices.Equal(got[id], revs) {
			t.Errorf("watch %d got revisions %v, want %v (messages %v)", id, got[id], revs, fmt.Sprint(msg.GetWatches()))
		}
	}
	if shared == 0 {
		t.Errorf("nothing shared: %v", msg.GetWatches())
	}
}
