package watch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pawlcfg/pawl/server/internal/store"
)

// ErrClosed is returned by Watcher.Next once the hub is closed: the server is
// shutting down and the client should resume elsewhere or later.
var ErrClosed = errors.New("watch: hub closed")

// Source is what the hub needs from a store: the commit feed, and the status
// and change log for watchers that start in the past or fall behind.
type Source interface {
	Status(ctx context.Context) (store.Status, error)
	Changes(ctx context.Context, from int64, prefix string, limit int) (store.Changes, error)
	Subscribe(fn store.CommitFunc) (unsubscribe func())
}

// Hub fans committed events out to many watchers.
//
// # Design
//
// The hub keeps the most recent events in one ring buffer shared by every
// watcher, bounded by an event count and a byte size. A watcher is a cursor
// (the next revision it needs) and a one-slot notify channel; it has no
// per-watcher event queue, so an idle watcher costs a few hundred bytes and
// the publisher never waits for anyone.
//
// Publish runs on the store's commit path. It appends the batch to the ring,
// evicting the oldest events, and then does a non-blocking send on the
// notify channel of every watcher whose prefix matches an event of the
// batch. It never blocks: a watcher whose notify slot is already full has a
// wake-up pending and will read everything new when it runs.
//
// Each watcher is driven by its own stream's goroutine calling Next. Next
// reads, under the read lock, the events of the ring from the watcher's
// cursor on, filtered by prefix, and advances the cursor. A watcher whose
// stream is slow (its client reads slowly, or the network is congested) just
// falls behind in the ring; the ring is the bounded buffer. When the
// watcher's cursor falls below the oldest event still in the ring, Next reads
// the store's change log from the cursor instead, batch by batch, until the
// cursor is back inside the ring, and then continues from the ring: it
// rejoins the live stream without a gap and without a duplicate, because the
// cursor alone decides what is delivered next. A watcher is never dropped.
// Only when the change log itself no longer has the cursor's revision
// (compaction) does Next fail, with a *store.CompactedError, and the stream
// tells the client to take a snapshot.
//
// Groups: a watcher of a Group has no notify channel of its own. Its
// wake-up puts it on the group's ready list and makes one pending wake-up
// on the group's channel. Publish does not mark a group's watchers one
// by one: it marks, once per group, the prefixes the batch concerns (one
// mark and one channel send per group, whatever the number of its
// watchers), and the group's Ready expands them into the group's watchers
// of those prefixes on the owner's side. The group's owner (a session's
// writer, one goroutine for all of the session's watchers) takes the
// ready list and drains each watcher with Poll, which is Next without the
// wait. Ten thousand watches over sixty-four sessions are then sixty-four
// goroutines to wake per event, not ten thousand, and everything a change
// did to one session's watches goes out in one message.
//
// A revision gap in the commit feed (possible with a shared store whose feed
// can lose messages) clears the ring and wakes every watcher, whatever its
// prefix, since the lost events may be anyone's: each reads the events
// around the gap from the store's change log, which is the source of truth.
//
// A watcher whose prefix is quiet is not slow: while events of other
// prefixes stream past, it sleeps, and its cursor stays where it was, soon
// below the ring. The hub keeps, per watched prefix, the newest revision of
// an event under it, and the newest of those that left the ring (and the
// revision from which it saw every event). A watcher with no event under
// its prefix since its cursor moves to the newest revision without reading
// anything (ten thousand idle watchers woken by a progress tick cost ten
// thousand map lookups, not ten thousand scans of the ring); one whose
// cursor is below the ring and above the last event that left it moves to
// the ring's oldest event instead of reading a change log that may be
// compacted by then. After a gap in the feed, what was lost is unknown, and
// only the log decides.
//
// Staleness: a shared store's feed can stop following the store (its
// backend is unreachable). The store tells the hub (SetStale), which wakes
// every watcher; each says once that it is stale, with the revision it
// has everything up to, and reports no progress until the hub follows
// again, when each reports its progress at once.
//
// Progress: a ticker owned by the hub marks every watcher "progress due" and
// wakes it; a watcher that is caught up then reports the revision it is
// current at. No per-watcher timer exists. A reader that needs to know
// sooner (one waiting for the store's revision while only other prefixes
// change) asks its watcher with RequestProgress: every Publish then wakes
// it until it reports a newer revision.
//
// Lock order: mu before wmu is never needed; Publish takes mu, releases it,
// then takes wmu. Next takes only mu (read), and Poll of a current
// watcher no lock at all. A Group's mu is taken under wmu (marking,
// registering, closing) or alone (Ready), never the other way round.
type Hub struct {
	src  Source
	opts options

	mu        sync.RWMutex
	ring      []store.Event // circular; capacity opts.ringEvents
	head      int           // index of the oldest event
	size      int           // number of events in the ring
	ringBytes int
	newest    int64 // revision of the newest event published
	closed    bool
	prefixes  map[string]*prefixTrack // what left the ring, per watched prefix
	evicted   []store.Event           // scratch: the events one Publish evicted
	stale     string                  // why the feed cannot follow the store; "" when it can
	staleGen  int64                   // counts the changes of stale
	// starting is set while New reads the store's revision: Publish then
	// only keeps the events in early, since which of them the revision
	// covers is not known yet. (Holding mu across that read instead would
	// deadlock with a store whose Status waits for the commit path that
	// calls Publish.)
	starting bool
	early    []store.Event
	// seen mirrors newest, staleGen and closed (written under mu with
	// them) so that Poll finds a current watcher current without the lock.
	seen seen

	wmu      sync.Mutex
	watchers map[string]map[*Watcher]struct{} // every open watcher, by prefix
	solo     map[string]map[*Watcher]struct{} // the watchers of no group, by prefix
	groups   map[string]map[*Group]int        // per prefix, the groups with watchers of it, and how many
	wanting  map[*Watcher]struct{}            // watchers that requested progress
	marking  map[*Group]marks                 // scratch of Publish: what to mark ready per group; guarded by wmu

	catchUps    atomic.Int64
	ctx         context.Context
	cancel      context.CancelFunc
	wg          sync.WaitGroup
	unsubscribe func()
	stopStale   func()
	closeOnce   sync.Once
}

// seen is what Poll reads of the hub without its lock.
type seen struct {
	newest   atomic.Int64
	staleGen atomic.Int64
	closed   atomic.Bool
}

// prefixTrack is what the hub saw of one watched prefix: every event after
// revision since was looked at; last is the newest of them under the
// prefix, and evicted the newest of them under the prefix that left the
// ring (0: none). Guarded by Hub.mu.
//
// revs are the revisions of the ring's events under the prefix after
// since, oldest first, so that a watcher behind the newest revision reads
// its prefix's events without scanning every other prefix's (an ACK flood
// writes thousands of events between two changes of the release records
// that every session's assignments follow).
type prefixTrack struct {
	watchers int
	since    int64
	last     int64
	evicted  int64
	revs     []int64
}

// trim drops the revisions older than oldest, the ring's oldest event,
// and gives back the front of revs once it is most of it.
func (t *prefixTrack) trim(oldest int64) {
	n := 0
	for n < len(t.revs) && t.revs[n] < oldest {
		n++
	}
	if n == 0 {
		return
	}
	if n == len(t.revs) {
		t.revs = t.revs[:0]
		return
	}
	// Measured against the whole array: a prefix that was busy and went
	// quiet would otherwise keep it, since no append reallocates it.
	if c := cap(t.revs); c > 64 && len(t.revs)-n < c/4 {
		t.revs = slices.Clone(t.revs[n:])
		return
	}
	t.revs = t.revs[n:]
}

// quietSinceLocked reports, for a watcher of prefix whose next revision is
// next, whether no event under the prefix came from next to the newest: it
// is current. The caller holds mu (read or write).
func (h *Hub) quietSinceLocked(prefix string, next int64) bool {
	t := h.prefixes[prefix]
	return t != nil && next > t.since && t.last < next
}

// quietBelowRingLocked reports, for a watcher of prefix whose next revision
// is next, below the ring, whether no event under the prefix came from next
// up to the ring's oldest event. The caller holds mu (read or write).
func (h *Hub) quietBelowRingLocked(prefix string, next int64) bool {
	t := h.prefixes[prefix]
	return t != nil && next > t.since && t.evicted < next
}

// New starts a hub fed by src. Close stops it.
func New(ctx context.Context, src Source, opts ...Option) (*Hub, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	hctx, cancel := context.WithCancel(context.Background())
	h := &Hub{
		src:      src,
		opts:     o,
		ring:     make([]store.Event, o.ringEvents),
		watchers: make(map[string]map[*Watcher]struct{}),
		solo:     make(map[string]map[*Watcher]struct{}),
		groups:   make(map[string]map[*Group]int),
		wanting:  make(map[*Watcher]struct{}),
		prefixes: make(map[string]*prefixTrack),
		ctx:      hctx,
		cancel:   cancel,
	}
	// Subscribe before reading the revision: an event committed in between
	// is kept in early, and published after it unless the revision covers
	// it.
	h.mu.Lock()
	h.starting = true
	h.mu.Unlock()
	h.unsubscribe = src.Subscribe(h.Publish)
	st, err := src.Status(ctx)
	if err != nil {
		h.unsubscribe()
		cancel()
		return nil, fmt.Errorf("watch: read store status: %w", err)
	}
	h.mu.Lock()
	h.newest = st.Revision
	h.seen.newest.Store(h.newest)
	h.mu.Unlock()
	// Publish what came meanwhile (what the revision covers is skipped),
	// until none is left; only then may Publish go straight to the ring,
	// so that nothing overtakes an early event.
	for {
		h.mu.Lock()
		early := h.early
		h.early = nil
		if len(early) == 0 {
			h.starting = false
			h.mu.Unlock()
			break
		}
		h.mu.Unlock()
		h.publish(early, true)
	}
	h.stopStale = func() {}
	if n, ok := src.(store.StaleNotifier); ok {
		h.stopStale = n.NotifyStale(h.SetStale)
	}
	h.wg.Add(1)
	go h.runProgress()
	return h, nil
}

// Close ends every watcher (their Next returns ErrClosed) and stops the
// hub's goroutine. It is idempotent.
func (h *Hub) Close() {
	h.closeOnce.Do(func() {
		h.unsubscribe()
		h.stopStale()
		h.mu.Lock()
		h.closed = true
		h.seen.closed.Store(true)
		h.mu.Unlock()
		h.cancel()
		// Wake every watcher, so that a group's owner, which waits for
		// no channel (NewGroupFunc), polls and finds the hub closed.
		h.eachWatcher(func(*Watcher) {})
		h.wg.Wait()
	})
}

// SetStale tells the hub why its feed cannot follow the store (err), or
// that it follows again (nil): every watcher is told once (and again when
// the reason changes, as when an unreachable Redis turns out to have gone
// back in time), and reports no progress while the hub is stale. A store that implements
// store.StaleNotifier calls it on its own.
func (h *Hub) SetStale(err error) {
	reason := ""
	if err != nil {
		reason = err.Error()
	}
	h.mu.Lock()
	if h.stale == reason {
		h.mu.Unlock()
		return
	}
	h.stale = reason
	h.staleGen++
	h.seen.staleGen.Store(h.staleGen)
	h.mu.Unlock()
	h.eachWatcher(func(*Watcher) {})
}

// eachWatcher calls fn for every open watcher, under wmu, and then wakes
// it (the watchers of a group marked together).
func (h *Hub) eachWatcher(fn func(w *Watcher)) {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	for _, set := range h.watchers {
		for w := range set {
			fn(w)
			h.wakeLocked(w)
		}
	}
	h.markGroupsLocked()
}

// markGroupsLocked marks what h.marking holds, each group once, and
// empties it. The caller holds wmu.
func (h *Hub) markGroupsLocked() {
	for g, m := range h.marking {
		g.mark(m)
	}
	clear(h.marking)
}

// want adds w, while it is open, to the watchers that every Publish wakes
// for progress.
func (h *Hub) want(w *Watcher) {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	if _, open := h.watchers[w.prefix][w]; open {
		h.wanting[w] = struct{}{}
		w.wanted.Store(true)
	}
}

// unwant removes w from the watchers that requested progress, and
// reports whether it was among them. Asking and answering both happen
// under wmu, so a request made while Next answers the one before is
// never lost.
func (h *Hub) unwant(w *Watcher) bool {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	_, wanted := h.wanting[w]
	delete(h.wanting, w)
	w.wanted.Store(false)
	return wanted
}

// StoreRevision is the store's current revision, which a hub fed by a
// shared store may not have published yet.
func (h *Hub) StoreRevision(ctx context.Context) (int64, error) {
	st, err := h.src.Status(ctx)
	if err != nil {
		return 0, fmt.Errorf("watch: read store status: %w", err)
	}
	return st.Revision, nil
}

// Revision is the newest revision the hub has published.
func (h *Hub) Revision() int64 {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.newest
}

// Stats is a snapshot of the hub's counters.
type Stats struct {
	// Watchers is the number of open watchers.
	Watchers int
	// LogCatchUps counts the change-log reads made for watchers that had
	// fallen out of the ring (or started before it).
	LogCatchUps int64
}

// Stats returns the hub's counters.
func (h *Hub) Stats() Stats {
	h.wmu.Lock()
	n := 0
	for _, set := range h.watchers {
		n += len(set)
	}
	h.wmu.Unlock()
	return Stats{Watchers: n, LogCatchUps: h.catchUps.Load()}
}

// Publish adds committed events, in revision order, and wakes the watchers
// they concern. It never blocks on a watcher. Events at or below the newest
// revision already published are ignored.
func (h *Hub) Publish(events []store.Event) { h.publish(events, false) }

// publish is Publish; early says the events are those that came while New
// read the store's revision, which New publishes itself.
func (h *Hub) publish(events []store.Event, early bool) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	if h.starting && !early {
		h.early = append(h.early, events...)
		h.mu.Unlock()
		return
	}
	added := events[:0:0]
	h.evicted = h.evicted[:0]
	gap := false
	for _, ev := range events {
		rev := ev.Revision()
		if rev <= h.newest {
			continue
		}
		if rev != h.newest+1 {
			h.clearLocked()
			gap = true
		}
		h.appendLocked(ev)
		h.newest = rev
		added = append(added, ev)
	}
	h.seen.newest.Store(h.newest)
	oldest := h.oldestLocked()
	for prefix, t := range h.prefixes {
		if gap {
			// What the lost events were is unknown: only the log can say.
			t.since, t.last, t.evicted, t.revs = h.newest, 0, 0, t.revs[:0]
			continue
		}
		for _, ev := range added {
			if strings.HasPrefix(ev.KV.Key, prefix) {
				t.last = ev.Revision()
				t.revs = append(t.revs, t.last)
			}
		}
		for _, ev := range h.evicted {
			if strings.HasPrefix(ev.KV.Key, prefix) {
				t.evicted = ev.Revision()
			}
		}
		t.trim(oldest)
	}
	clear(h.evicted) // drop the values, keep the capacity
	h.mu.Unlock()
	if len(added) == 0 {
		return
	}
	h.wmu.Lock()
	defer h.wmu.Unlock()
	// The watchers of groups are marked per group once every watcher the
	// batch concerns is known, so that a group's owner finds them all
	// ready at its wake-up (one message for what one change did).
	for w := range h.wanting {
		h.wakeLocked(w) // the publish may have made it current at a newer revision
	}
	for prefix, set := range h.solo {
		// After a gap, the lost events may concern any prefix: every
		// watcher wakes and reads them from the change log.
		if !gap && !anyUnder(added, prefix) {
			continue
		}
		for w := range set {
			w.wake()
		}
	}
	// A group's watchers are marked by prefix, once per group: the cost on
	// the commit path is per group, not per watcher.
	for prefix, gs := range h.groups {
		if !gap && !anyUnder(added, prefix) {
			continue
		}
		for g := range gs {
			m := h.markingOf(g)
			m.prefixes = append(m.prefixes, prefix)
			h.marking[g] = m
		}
	}
	h.markGroupsLocked()
}

// markingOf is what h.marking holds for g, creating the map. The caller
// holds wmu.
func (h *Hub) markingOf(g *Group) marks {
	if h.marking == nil {
		h.marking = map[*Group]marks{}
	}
	return h.marking[g]
}

// wakeLocked wakes w, or for a watcher of a group notes it in h.marking,
// which the caller marks. The caller holds wmu.
func (h *Hub) wakeLocked(w *Watcher) {
	if w.group == nil {
		w.wake()
		return
	}
	m := h.markingOf(w.group)
	m.watchers = append(m.watchers, w)
	h.marking[w.group] = m
}

func anyUnder(events []store.Event, prefix string) bool {
	for _, ev := range events {
		if strings.HasPrefix(ev.KV.Key, prefix) {
			return true
		}
	}
	return false
}

// appendLocked adds ev to the ring, evicting the oldest events (into
// h.evicted) while the ring is over its count or byte limit. The caller
// holds mu.
func (h *Hub) appendLocked(ev store.Event) {
	n := eventBytes(ev)
	for h.size > 0 && (h.size == len(h.ring) || h.ringBytes+n > h.opts.ringBytes) {
		h.evicted = append(h.evicted, h.ring[h.head])
		h.ringBytes -= eventBytes(h.ring[h.head])
		h.ring[h.head] = store.Event{}
		h.head = (h.head + 1) % len(h.ring)
		h.size--
	}
	h.ring[(h.head+h.size)%len(h.ring)] = ev
	h.size++
	h.ringBytes += n
}

// clearLocked empties the ring. The caller holds mu.
func (h *Hub) clearLocked() {
	clear(h.ring)
	h.head, h.size, h.ringBytes = 0, 0, 0
}

// oldestLocked is the revision of the oldest event in the ring, or newest+1
// when it is empty. The caller holds mu.
func (h *Hub) oldestLocked() int64 {
	if h.size == 0 {
		return h.newest + 1
	}
	return h.ring[h.head].Revision()
}

func eventBytes(ev store.Event) int { return len(ev.KV.Key) + len(ev.KV.Value) + 96 }

// runProgress marks every watcher progress-due each interval. Its exit is
// Close cancelling h.ctx.
func (h *Hub) runProgress() {
	defer h.wg.Done()
	t := time.NewTicker(h.opts.progressInterval)
	defer t.Stop()
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-t.C:
			h.eachWatcher(func(w *Watcher) { w.progressDue.Store(true) })
		}
	}
}

// Watch registers a watcher for keys under prefix, from revision start
// (inclusive; 0 means after the newest revision). It fails with a
// *store.CompactedError when start is compacted and a
// *store.FutureRevisionError when start is more than one past the store's
// revision. The caller must Close the watcher.
func (h *Hub) Watch(ctx context.Context, prefix string, start int64) (*Watcher, error) {
	return h.watch(ctx, prefix, start, nil)
}

// watch is Watch, for a watcher of group g (nil: a watcher of its own,
// woken through its notify channel).
func (h *Hub) watch(ctx context.Context, prefix string, start int64, g *Group) (*Watcher, error) {
	w := &Watcher{hub: h, prefix: prefix, group: g}
	if g == nil {
		w.notify = make(chan struct{}, 1)
	}
	if start > 0 {
		st, err := h.src.Status(ctx)
		if err != nil {
			return nil, fmt.Errorf("watch: read store status: %w", err)
		}
		switch {
		case start <= st.CompactRevision:
			return nil, &store.CompactedError{Requested: start, CompactRevision: st.CompactRevision, Revision: st.Revision}
		case start > st.Revision+1:
			return nil, &store.FutureRevisionError{Requested: start, Revision: st.Revision}
		}
		w.next = start
	}
	h.mu.Lock()
	closed := h.closed
	if start == 0 {
		w.next = h.newest + 1
	}
	w.staleSeen = h.staleGen
	if h.stale != "" {
		w.staleSeen-- // a new watcher of a stale hub is told at once
	}
	if !closed {
		t := h.prefixes[prefix]
		if t == nil {
			t = &prefixTrack{since: h.newest}
			h.prefixes[prefix] = t
		}
		t.watchers++
	}
	h.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	h.wmu.Lock()
	addTo(h.watchers, prefix, w)
	if g == nil {
		addTo(h.solo, prefix, w)
	} else {
		gs := h.groups[prefix]
		if gs == nil {
			gs = make(map[*Group]int)
			h.groups[prefix] = gs
		}
		gs[g]++
		g.mu.Lock()
		addTo(g.byPrefix, prefix, w)
		g.mu.Unlock()
	}
	h.wmu.Unlock()
	return w, nil
}

// addTo adds w to m's set for prefix, creating it.
func addTo(m map[string]map[*Watcher]struct{}, prefix string, w *Watcher) {
	set := m[prefix]
	if set == nil {
		set = make(map[*Watcher]struct{})
		m[prefix] = set
	}
	set[w] = struct{}{}
}

// removeFrom removes w from m's set for prefix, and the set when empty.
func removeFrom(m map[string]map[*Watcher]struct{}, prefix string, w *Watcher) {
	if set := m[prefix]; set != nil {
		delete(set, w)
		if len(set) == 0 {
			delete(m, prefix)
		}
	}
}
