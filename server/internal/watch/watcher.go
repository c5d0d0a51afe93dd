package watch

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/pawlcfg/pawl/server/internal/store"
)

// Watcher is one watch: a cursor over the hub's events under a prefix.
//
// Next (or Poll) and Close may be called from one goroutine at a time (the
// stream's handler, or the owner of the watcher's Group); the hub wakes
// the watcher concurrently.
type Watcher struct {
	hub    *Hub
	prefix string
	next   int64         // the next revision to deliver; owned by Next's caller
	notify chan struct{} // buffered(1): a pending wake-up; nil for a watcher of a group
	// group, when set, is the group whose wake-up the watcher shares;
	// inReady says it is on the group's ready list (guarded by group.mu).
	group       *Group
	inReady     bool
	progressDue atomic.Bool
	// reported is the newest progress reported; owned by Next's caller.
	// Whether progress is wanted is the watcher's place in Hub.wanting;
	// wanted mirrors it (written under Hub.wmu) so that Next looks
	// without the lock.
	reported  int64
	wanted    atomic.Bool
	closed    bool
	staleSeen int64 // the hub's staleness generation last reported; owned by Next's caller
}

// Batch is what Next delivers: events, or else a progress notification,
// or else a stale notice.
type Batch struct {
	// Events are matching changes in revision order; empty for progress.
	Events []store.Event
	// Progress, when Events is empty, is the revision the watcher is current
	// at: every matching change up to it was delivered. With Stale, it is
	// the revision up to which it has every change, while later ones may
	// exist.
	Progress int64
	// Stale, when set, says why the hub cannot follow the store: nothing
	// new is delivered, and no progress reported, until it can.
	Stale string
}

// StartedAt is the revision after which the watcher delivers changes, before
// the first call to Next.
func (w *Watcher) StartedAt() int64 { return w.next - 1 }

// Next blocks until there are events for the watcher or a progress
// notification is due, and returns them. It returns ctx.Err() when ctx ends,
// ErrClosed when the hub closes, and a *store.CompactedError when the
// watcher needs a revision the change log no longer holds; after an error,
// only Close may be called. A watcher of a Group is drained with Poll
// instead: its wake-ups go to the group.
func (w *Watcher) Next(ctx context.Context) (Batch, error) {
	h := w.hub
	for {
		b, ok, err := w.Poll(ctx)
		if err != nil || ok {
			return b, err
		}
		select {
		case <-w.notify:
		case <-ctx.Done():
			return Batch{}, ctx.Err()
		case <-h.ctx.Done():
			return Batch{}, ErrClosed
		}
	}
}

// Poll is Next without the wait: it returns what is pending for the
// watcher (events from the ring or from the change log, a stale notice,
// a progress notification), with ok set, or ok unset when nothing is. It
// reads the store's change log when the watcher fell out of the ring, but
// never waits for a change. Its errors are Next's; after an error, only
// Close may be called. A watcher of a Group is polled by the group's
// owner until ok is unset, after Ready returned it.
func (w *Watcher) Poll(ctx context.Context) (b Batch, ok bool, err error) {
	h := w.hub
	if w.current() {
		return Batch{}, false, nil
	}
	for {
		events, needLog, err := w.fromRing()
		if err != nil {
			return Batch{}, false, err
		}
		if len(events) > 0 {
			return Batch{Events: events}, true, nil
		}
		if needLog {
			h.catchUps.Add(1)
			ch, err := h.src.Changes(ctx, w.next, w.prefix, h.opts.catchUpBatch)
			if err != nil {
				return Batch{}, false, err
			}
			w.next = ch.Through + 1
			if len(ch.Events) > 0 {
				return Batch{Events: ch.Events}, true, nil
			}
			continue
		}
		if reason, changed := w.staleness(); changed {
			// Stale: say so once. Following again: say how current.
			return Batch{Progress: w.next - 1, Stale: reason}, true, nil
		} else if reason != "" {
			w.progressDue.Store(false) // no progress while stale
		}
		if w.progressDue.Swap(false) {
			w.reported = w.next - 1
			return Batch{Progress: w.next - 1}, true, nil
		}
		if w.next-1 > w.reported && w.wanted.Load() && w.hub.unwant(w) {
			w.reported = w.next - 1
			return Batch{Progress: w.next - 1}, true, nil
		}
		return Batch{}, false, nil
	}
}

// current reports, without the hub's lock, that nothing is pending for
// the watcher: its cursor is past the newest revision, no stale notice,
// progress or progress request is due, and the hub is open. A session's
// writer polls each ready watcher until it has nothing: that last poll,
// one per watcher and change, then costs a few atomic loads, not the
// hub's read lock twice.
func (w *Watcher) current() bool {
	s := &w.hub.seen
	return w.next > s.newest.Load() &&
		s.staleGen.Load() == w.staleSeen &&
		!s.closed.Load() &&
		!w.progressDue.Load() &&
		!w.wanted.Load()
}

// RequestProgress asks for a progress notification as soon as the watcher
// is current at a revision newer than the last one it reported: at once
// when changes under other prefixes moved it, or else when the hub next
// publishes anything (as etcd's RequestProgress). A reader that waits for
// the store's revision uses it, since changes outside the prefix deliver
// no events and would otherwise move the revision only every progress
// interval. It may be called from any goroutine; requests made before Next
// reports are one request.
func (w *Watcher) RequestProgress() {
	w.hub.want(w)
	w.wake()
}

// Prefix is the prefix the watcher follows.
func (w *Watcher) Prefix() string { return w.prefix }

// fromRing copies the matching events of the ring from the cursor on, at
// most opts.maxBatch of them, and advances the cursor past every event it
// examined. needLog says that the cursor is older than the ring and events
// under the prefix may have come since.
func (w *Watcher) fromRing() (events []store.Event, needLog bool, err error) {
	h := w.hub
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.closed {
		return nil, false, ErrClosed
	}
	if w.next > h.newest {
		return nil, false, nil
	}
	if h.quietSinceLocked(w.prefix, w.next) {
		w.next = h.newest + 1 // nothing under the prefix since the cursor
		return nil, false, nil
	}
	oldest := h.oldestLocked()
	if w.next < oldest {
		if !h.quietBelowRingLocked(w.prefix, w.next) {
			return nil, true, nil
		}
		// Nothing under the prefix left the ring after the cursor: the
		// watcher was quiet, not behind.
		w.next = oldest
	}
	if t := h.prefixes[w.prefix]; t != nil && w.next > t.since {
		return w.fromIndexLocked(t, oldest), false, nil
	}
	// At most maxBatch events, but never part of a transaction: a
	// transaction is delivered as one message.
	inTxn := false
	for i := int(w.next - oldest); i < h.size && (len(events) < h.opts.maxBatch || inTxn); i++ {
		ev := h.ring[(h.head+i)%len(h.ring)]
		w.next = ev.Revision() + 1
		inTxn = ev.More
		if strings.HasPrefix(ev.KV.Key, w.prefix) {
			events = append(events, ev)
		}
	}
	return events, false, nil
}

// fromIndexLocked is fromRing for a cursor the prefix's track covers
// (next after t.since, at or after the ring's oldest revision): it
// copies the events the track lists from the cursor on, without looking
// at the other prefixes' events between them. As fromRing, it takes at
// most opts.maxBatch events, but never part of a transaction, and
// advances the cursor past every event it accounts for: to the newest
// revision when it took every listed event, else past the transaction of
// the last one it took. The caller holds mu (read or write).
func (w *Watcher) fromIndexLocked(t *prefixTrack, oldest int64) (events []store.Event) {
	h := w.hub
	at := func(rev int64) store.Event { return h.ring[(h.head+int(rev-oldest))%len(h.ring)] }
	i, _ := slices.BinarySearch(t.revs, w.next)
	for ; i < len(t.revs); i++ {
		rev := t.revs[i]
		if len(events) >= h.opts.maxBatch && !sameTxn(at, events[len(events)-1].Revision(), rev) {
			break
		}
		events = append(events, at(rev))
	}
	if i == len(t.revs) {
		w.next = h.newest + 1
		return events
	}
	// Stopped at maxBatch: the cursor goes past the end of the last
	// event's transaction.
	last := events[len(events)-1].Revision()
	for last < h.newest && at(last).More {
		last++
	}
	w.next = last + 1
	return events
}

// sameTxn reports whether the events at revisions from and to (from <
// to) are of one transaction: every event from from up to to's previous
// says that more of its transaction follows.
func sameTxn(at func(int64) store.Event, from, to int64) bool {
	for rev := from; rev < to; rev++ {
		if !at(rev).More {
			return false
		}
	}
	return true
}

// staleness reports why the hub is stale ("" when it is not) and whether
// that changed since the watcher last reported it.
func (w *Watcher) staleness() (reason string, changed bool) {
	h := w.hub
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.staleGen == w.staleSeen {
		return h.stale, false
	}
	w.staleSeen = h.staleGen
	return h.stale, true
}

// wake makes a pending wake-up without blocking: on the watcher's notify
// channel, or on its group's.
func (w *Watcher) wake() {
	if w.group != nil {
		w.group.mark(marks{watchers: []*Watcher{w}})
		return
	}
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

// Close unregisters the watcher. It is idempotent.
func (w *Watcher) Close() {
	if w.closed {
		return
	}
	w.closed = true
	h := w.hub
	h.mu.Lock()
	if t := h.prefixes[w.prefix]; t != nil {
		if t.watchers--; t.watchers == 0 {
			delete(h.prefixes, w.prefix)
		}
	}
	h.mu.Unlock()
	h.wmu.Lock()
	defer h.wmu.Unlock()
	delete(h.wanting, w)
	removeFrom(h.watchers, w.prefix, w)
	g := w.group
	if g == nil {
		removeFrom(h.solo, w.prefix, w)
		return
	}
	if gs := h.groups[w.prefix]; gs != nil {
		if gs[g]--; gs[g] <= 0 {
			delete(gs, g)
		}
		if len(gs) == 0 {
			delete(h.groups, w.prefix)
		}
	}
	g.mu.Lock()
	removeFrom(g.byPrefix, w.prefix, w)
	g.mu.Unlock()
}
