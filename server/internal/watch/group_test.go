package watch_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pawlcfg/pawl/server/internal/store"
	"github.com/pawlcfg/pawl/server/internal/watch"
)

// drain is a group's owner: it waits for the group's wake-up and polls
// every ready watcher until it has nothing, collecting events per
// watcher; rounds counts the wake-ups that found something.
type drain struct {
	t      *testing.T
	g      *watch.Group
	events map[*watch.Watcher][]store.Event
}

func newDrain(t *testing.T, g *watch.Group) *drain {
	return &drain{t: t, g: g, events: map[*watch.Watcher][]store.Event{}}
}

// round waits for one wake-up and drains what is ready; it returns the
// watchers that had events.
func (d *drain) round(ctx context.Context) []*watch.Watcher {
	d.t.Helper()
	select {
	case <-d.g.Notify():
	case <-ctx.Done():
		d.t.Fatal("no wake-up")
	}
	var got []*watch.Watcher
	for _, w := range d.g.Ready() {
		for {
			b, ok, err := w.Poll(ctx)
			if err != nil {
				d.t.Fatalf("Poll: %v", err)
			}
			if !ok {
				break
			}
			if len(b.Events) > 0 {
				d.events[w] = append(d.events[w], b.Events...)
				got = append(got, w)
			}
		}
	}
	return got
}

// TestGroupMarksEveryWatcherOfAChangeTogether: one put under two
// watchers' prefixes wakes their group once, with both ready, so that
// one round delivers the change to both; a third watcher of another
// prefix stays quiet.
func TestGroupMarksEveryWatcherOfAChangeTogether(t *testing.T) {
	st, hub := newHub(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g := hub.NewGroup()
	var ws []*watch.Watcher
	for _, prefix := range []string{"/a/", "/a/b/", "/z/"} {
		w, err := g.Watch(ctx, prefix, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		ws = append(ws, w)
	}
	d := newDrain(t, g)
	if got := d.round(ctx); len(got) != 0 { // new watchers are ready once, with nothing yet
		t.Fatalf("events before any put: %v", got)
	}
	for i := range 50 {
		rev := put(t, st, "/a/b/k", fmt.Sprint(i))
		got := d.round(ctx)
		if len(got) != 2 || got[0] == got[1] || got[0] == ws[2] || got[1] == ws[2] {
			t.Fatalf("put %d: one round should deliver to /a/ and /a/b/ both, got %d watchers", i, len(got))
		}
		for _, w := range ws[:2] {
			if evs := d.events[w]; evs[len(evs)-1].Revision() != rev {
				t.Fatalf("put %d: last event %d, want %d", i, evs[len(evs)-1].Revision(), rev)
			}
		}
	}
	if len(d.events[ws[2]]) != 0 {
		t.Fatalf("the /z/ watcher got %d events", len(d.events[ws[2]]))
	}
}

// TestGroupOwnerThatDoesNotDrainBlocksNobody: a group whose owner does
// not poll while thousands of events are published (more than the ring
// holds) neither blocks the publisher nor a second group's owner; when it
// drains at last it gets every event once, in order (the ring, then the
// change log).
func TestGroupOwnerThatDoesNotDrainBlocksNobody(t *testing.T) {
	st, hub := newHub(t, nil, watch.WithRingEvents(64), watch.WithMaxBatch(16))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	slow, fast := hub.NewGroup(), hub.NewGroup()
	from := hub.Revision() + 1
	ws, err := slow.Watch(ctx, "/k/", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	wf, err := fast.Watch(ctx, "/k/", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer wf.Close()
	const n = 500
	var wg sync.WaitGroup
	wg.Add(1)
	var fastErr error
	go func() { // the fast owner follows every put as it comes
		defer wg.Done()
		d := newDrain(t, fast)
		for len(d.events[wf]) < n {
			select {
			case <-fast.Notify():
			case <-ctx.Done():
				fastErr = errors.New("the fast group was not woken")
				return
			}
			for _, w := range fast.Ready() {
				for {
					b, ok, err := w.Poll(ctx)
					if err != nil {
						fastErr = err
						return
					}
					if !ok {
						break
					}
					d.events[w] = append(d.events[w], b.Events...)
				}
			}
		}
		if evs := d.events[wf]; evs[0].Revision() != from || evs[n-1].Revision() != from+n-1 {
			fastErr = fmt.Errorf("fast group got revisions %d..%d", evs[0].Revision(), evs[len(evs)-1].Revision())
		}
	}()
	for i := range n {
		put(t, st, fmt.Sprintf("/k/%d", i%7), fmt.Sprint(i))
	}
	wg.Wait()
	if fastErr != nil {
		t.Fatal(fastErr)
	}
	// The slow owner drains only now: from the change log, then the ring.
	d := newDrain(t, slow)
	for len(d.events[ws]) < n {
		d.round(ctx)
		if len(d.events[ws]) < n {
			slow.Ready() // nothing new is marked: poll again until drained
		}
	}
	expectConsecutive(t, d.events[ws], from)
}

// TestPollIsNextWithoutTheWait: Poll reports nothing pending, then the
// events of a put, then a requested progress notification; a closed hub
// makes it fail with ErrClosed.
func TestPollIsNextWithoutTheWait(t *testing.T) {
	st, hub := newHub(t, nil)
	ctx := context.Background()
	g := hub.NewGroup()
	w, err := g.Watch(ctx, "/p/", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, ok, err := w.Poll(ctx); ok || err != nil {
		t.Fatalf("Poll with nothing pending: ok %v, err %v", ok, err)
	}
	rev := put(t, st, "/p/x", "1")
	b, ok, err := w.Poll(ctx)
	if !ok || err != nil || len(b.Events) != 1 || b.Events[0].Revision() != rev {
		t.Fatalf("Poll after a put: %v %v %v", b, ok, err)
	}
	put(t, st, "/q/x", "1")
	w.RequestProgress()
	if b, ok, _ := w.Poll(ctx); !ok || b.Progress != rev+1 {
		t.Fatalf("Poll after a progress request: %v %v", b, ok)
	}
	hub.Close()
	select {
	case <-g.Done():
	default:
		t.Fatal("Done is open after the hub closed")
	}
	if _, _, err := w.Poll(ctx); !errors.Is(err, watch.ErrClosed) {
		t.Fatalf("Poll of a closed hub: %v", err)
	}
}

// TestPublishMarksAGroupOncePerPrefix: a put under a prefix that a
// group's 500 watchers follow marks the group once, by prefix, without
// putting each watcher on its ready list on the commit path; Ready then
// hands out every one of them once (a watcher also marked on its own
// included), and never a closed one or one of another prefix.
func TestPublishMarksAGroupOncePerPrefix(t *testing.T) {
	st, hub := newHub(t, nil, watch.WithProgressInterval(time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g := hub.NewGroup()
	fleet := map[*watch.Watcher]bool{}
	for range 500 {
		w, err := g.Watch(ctx, "/fleet/", 0)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		fleet[w] = true
	}
	other, err := g.Watch(ctx, "/other/", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	wait := func() {
		t.Helper()
		select {
		case <-g.Notify():
		case <-ctx.Done():
			t.Fatal("no wake-up")
		}
	}
	// readyOnce checks that Ready hands out exactly want, each once.
	readyOnce := func(want map[*watch.Watcher]bool) {
		t.Helper()
		got := map[*watch.Watcher]bool{}
		for _, w := range g.Ready() {
			if got[w] {
				t.Fatal("Ready handed out a watcher twice")
			}
			if !want[w] {
				t.Fatalf("Ready handed out a watcher of %s that is closed or not concerned", w.Prefix())
			}
			got[w] = true
		}
		if len(got) != len(want) {
			t.Fatalf("Ready handed out %d watchers, want %d", len(got), len(want))
		}
	}
	wait()
	all := map[*watch.Watcher]bool{other: true}
	for w := range fleet {
		all[w] = true
	}
	readyOnce(all) // new watchers are ready once

	put(t, st, "/fleet/k", "1")
	wait()
	if n := watch.MarkedOneByOne(g); n != 0 {
		t.Fatalf("Publish marked %d watchers one by one; want the group marked once by prefix", n)
	}
	readyOnce(fleet)

	var one, closed *watch.Watcher
	for w := range fleet {
		if one == nil {
			one = w
		} else if closed == nil {
			closed = w
		}
	}
	one.RequestProgress() // marked on its own, and by its prefix at the put
	closed.Close()
	delete(fleet, closed)
	put(t, st, "/fleet/k", "2")
	wait()
	readyOnce(fleet)
}

// TestPollOfACurrentWatcherTakesNoLock: a session's writer polls each
// ready watcher until it has nothing; that last poll of a watcher already
// at the newest revision answers without the hub's lock, so it neither
// waits for a Publish nor slows one.
func TestPollOfACurrentWatcherTakesNoLock(t *testing.T) {
	st, hub := newHub(t, nil, watch.WithProgressInterval(time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w := watchFrom(t, hub, "/a/", 0)
	defer w.Close()
	put(t, st, "/a/k", "1")
	if b, err := w.Next(ctx); err != nil || len(b.Events) != 1 {
		t.Fatalf("Next: %v, %v", b, err)
	}
	unlock := watch.LockHub(hub)
	done := make(chan error, 1)
	go func() {
		_, ok, err := w.Poll(ctx)
		if ok {
			err = errors.New("Poll of a current watcher returned something")
		}
		done <- err
	}()
	select {
	case err := <-done:
		unlock()
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		unlock()
		t.Fatal("Poll of a current watcher waited for the hub's lock")
	}
}
