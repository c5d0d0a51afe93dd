package sdk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
)

// Entry is one key of a space.
type Entry struct {
	// Key is the full key.
	Key string `json:"key"`
	// Value is the value (read-only).
	Value []byte `json:"value"`
	// ModRevision is the revision of the key's last change.
	ModRevision int64 `json:"mod_revision"`
}

// Change is one change to a space: a put or a delete of one key.
type Change struct {
	// Key is the key that changed.
	Key string
	// Value is the new value; nil for a delete.
	Value []byte
	// Deleted says the key was removed.
	Deleted bool
	// Revision is the revision of the change.
	Revision int64
}

// Space is a live copy of every key under a prefix of the KV store, kept
// current through one watch: only changed keys travel. It survives
// reconnects (the watch resumes after the last revision it saw) and
// compaction (it reads a fresh snapshot and reports the difference as
// changes), so its copy never misses a change. When the store was
// restored from a backup meanwhile (another incarnation), the server says
// so and the copy is replaced by a fresh snapshot of the restored store,
// even at a lower revision than the copy had. Its methods are safe for
// concurrent use.
type Space struct {
	c      *Client
	prefix string
	state  atomic.Pointer[spaceState]
	// resyncs counts the fresh listings after a compaction.
	resyncs atomic.Int64
	// stale is set while the server says it cannot follow the store.
	stale atomic.Bool
	// incarnation is the store's incarnation the last WatchStarted named
	// ("" until one did, or when the store has none), sent back when the
	// watch resumes: a store restored from a backup has another, and
	// answers with a resync instead of going on from a revision of
	// another history. Only the follow goroutine uses it.
	incarnation string

	mu       sync.Mutex
	subs     map[int]func(Change)
	nextSub  int
	advanced chan struct{} // closed, and replaced, when the revision moves

	cancel context.CancelFunc
	done   chan struct{}
}

// spaceState is the space at one revision; immutable.
type spaceState struct {
	rev     int64
	entries map[string]Entry
}

// Space starts following every key under prefix. It returns once the copy
// holds the store's keys at some revision, read from the server or, when
// the server cannot be reached, from the cache directory (verified by its
// checksum); it then keeps the copy current until Close or the client's
// Close. ctx bounds only that first read.
func (c *Client) Space(ctx context.Context, prefix string) (*Space, error) {
	s := &Space{c: c, prefix: prefix, subs: map[int]func(Change){}, advanced: make(chan struct{}), done: make(chan struct{})}
	s.state.Store(&spaceState{entries: map[string]Entry{}})
	first, err := c.listSpace(ctx, prefix, 0)
	if err != nil {
		cached, ok := cachedSpaceOf(c.cache, prefix)
		if !ok {
			return nil, fmt.Errorf("sdk: space %q: %w (and the cache has no copy)", prefix, err)
		}
		c.cfg.log.Warn("pawl: a space starts from its cache", "prefix", prefix, "revision", cached.rev, "error", err)
		first = cached
	}
	s.install(first)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, errClosed
	}
	var sctx context.Context
	sctx, s.cancel = context.WithCancel(c.ctx)
	c.wg.Add(1)
	c.mu.Unlock()
	go s.follow(sctx)
	return s, nil
}

func cachedSpaceOf(d *diskCache, prefix string) (*spaceState, bool) {
	if d == nil {
		return nil, false
	}
	cs, ok := d.space(prefix)
	if !ok {
		return nil, false
	}
	st := &spaceState{rev: cs.Revision, entries: make(map[string]Entry, len(cs.Entries))}
	for _, e := range cs.Entries {
		st.entries[e.Key] = e
	}
	return st, true
}

// Close stops following; the copy stays readable at its last revision.
func (s *Space) Close() {
	s.cancel()
	<-s.done
}

// Prefix is the prefix the space follows.
func (s *Space) Prefix() string { return s.prefix }

// Get returns the entry of key, without locks.
func (s *Space) Get(key string) (Entry, bool) {
	e, ok := s.state.Load().entries[key]
	return e, ok
}

// Revision is the store revision the copy is at: it holds every change up
// to it.
func (s *Space) Revision() int64 { return s.state.Load().rev }

// Resyncs is how many times the copy was read again from a fresh listing
// because the changes it needed had been compacted.
func (s *Space) Resyncs() int64 { return s.resyncs.Load() }

// Stale reports whether the server the space follows said it cannot
// follow the store (it lost its backend: a stale notice on the watch, or
// a watch refused as Unavailable), and no server has sent anything
// since: the copy may be out of date. Given several servers, the space
// moves to another one.
func (s *Space) Stale() bool { return s.stale.Load() }

// Len is how many keys the copy holds.
func (s *Space) Len() int { return len(s.state.Load().entries) }

// Entries returns every entry, in key order, at one revision.
func (s *Space) Entries() ([]Entry, int64) {
	st := s.state.Load()
	out := make([]Entry, 0, len(st.entries))
	for _, e := range st.entries {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, st.rev
}

// WaitRevision waits until the copy is at revision rev or later. A
// revision that no change under the space's prefix brings (a write
// elsewhere) reaches the copy by a progress notification. On an instance
// client's session, WaitRevision asks the server for one at once, and
// again every progressAskInterval while it waits (the request reaches
// only the watches open when it arrives: one that a new session opens
// after it, or a server behind the revision, needs another); otherwise
// (WithoutSession, WithoutAssignments, an older server) the server sends
// one every --progress-interval (10 s by default).
func (s *Space) WaitRevision(ctx context.Context, rev int64) error {
	var ask <-chan time.Time
	for {
		s.mu.Lock()
		at, advanced := s.state.Load().rev, s.advanced
		s.mu.Unlock()
		if at >= rev {
			return nil
		}
		if ask == nil {
			s.c.sess.requestProgress()
			t := time.NewTicker(progressAskInterval)
			defer t.Stop()
			ask = t.C
		}
		select {
		case <-advanced:
		case <-ask:
			s.c.sess.requestProgress()
		case <-ctx.Done():
			return fmt.Errorf("sdk: space %q waiting for revision %d (at %d): %w", s.prefix, rev, at, ctx.Err())
		}
	}
}

// progressAskInterval is how often WaitRevision asks the session for
// progress again while it waits.
const progressAskInterval = time.Second

// OnChange calls fn with every change from now on, in revision order, from
// the goroutine that follows the space: fn must return quickly. The
// returned function stops the calls.
func (s *Space) OnChange(fn func(Change)) (stop func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nextSub
	s.nextSub++
	s.subs[n] = fn
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.subs, n)
	}
}

// follow keeps the copy current until ctx ends: a watch from the revision
// after the copy's, resumed after every failure, and a fresh listing when
// the watch says the revisions it needs were compacted. Its exit is ctx.
func (s *Space) follow(ctx context.Context) {
	defer s.c.wg.Done()
	defer close(s.done)
	defer s.saveToCache()
	b := s.c.newBackoff()
	var lastSave time.Time
	for ctx.Err() == nil {
		compacted, restored, err := s.watch(ctx, b, &lastSave)
		if ctx.Err() != nil {
			return
		}
		if compacted > 0 {
			st, lerr := s.c.listSpace(ctx, s.prefix, compacted)
			if lerr != nil && connect.CodeOf(lerr) == connect.CodeFailedPrecondition {
				st, lerr = s.c.listSpace(ctx, s.prefix, 0) // that revision was compacted too
			}
			if lerr == nil {
				// Counted first: install wakes those waiting for the
				// revision, who may read the count next.
				s.resyncs.Add(1)
				if restored {
					s.replace(st)
				} else {
					s.install(st)
				}
				continue
			}
			err = lerr
		}
		if connect.CodeOf(err) == connect.CodeUnavailable {
			// The server cannot serve the watch (it lost its store, or it
			// is stopping): until one does, the copy may be out of date.
			s.stale.Store(true)
		}
		s.c.cfg.log.Info("pawl: a space's watch ended; resuming", "prefix", s.prefix, "revision", s.Revision(), "error", err)
		b.wait(ctx)
	}
}

// watch runs one watch from the copy's revision. It returns the revision
// to list at when the watch reports a compaction, with restored set when
// the reason is that the store is another incarnation, or the error that
// ended it.
func (s *Space) watch(ctx context.Context, b *backoff, lastSave *time.Time) (_ int64, restored bool, _ error) {
	req := &pawlv1.WatchRequest{Prefix: s.prefix, StartRevision: s.Revision() + 1, Incarnation: s.incarnation}
	stream, err := s.c.openWatch(ctx, req)
	if err != nil {
		return 0, false, err
	}
	defer stream.Close()
	for stream.Receive() {
		b.reset()
		switch m := stream.Msg(); {
		case m.GetStarted() != nil:
			if inc := m.GetStarted().GetIncarnation(); inc != "" {
				s.incarnation = inc
			}
		case m.GetEvents() != nil:
			s.apply(m.GetEvents().GetEvents())
			if time.Since(*lastSave) > time.Second {
				s.saveToCache()
				*lastSave = time.Now()
			}
		case m.GetProgress() != nil:
			s.advance(m.GetProgress().GetRevision())
		case m.GetCompacted() != nil:
			c := m.GetCompacted()
			return max(c.GetSnapshotRevision(), 1), c.GetReason() == pawlv1.WatchResyncReason_WATCH_RESYNC_REASON_INCARNATION_CHANGED, nil
		case m.GetStale() != nil:
			// The server cannot follow the store. Alone, it is the only
			// source: keep the stream, which goes on when it recovers.
			// Given others, resume on the next one.
			s.stale.Store(true)
			if s.c.servers != nil {
				from := s.c.Server()
				s.c.moveOn()
				return 0, false, fmt.Errorf("sdk: %s cannot follow the store: %s", from, m.GetStale().GetReason())
			}
			continue
		}
		s.stale.Store(false)
	}
	if err := stream.Err(); err != nil {
		return 0, false, err
	}
	return 0, false, io.EOF
}

// listSpace reads every key under prefix at revision rev (0: the current
// one), page by page at one revision.
func (c *Client) listSpace(ctx context.Context, prefix string, rev int64) (*spaceState, error) {
	st := &spaceState{entries: map[string]Entry{}}
	token := ""
	for {
		resp, err := c.kv.List(ctx, connect.NewRequest(&pawlv1.ListRequest{Prefix: prefix, Revision: rev, PageSize: 1000, PageToken: token}))
		if err != nil {
			return nil, err
		}
		for _, kv := range resp.Msg.GetKvs() {
			st.entries[kv.GetKey()] = Entry{Key: kv.GetKey(), Value: kv.GetValue(), ModRevision: kv.GetModRevision()}
		}
		st.rev = resp.Msg.GetRevision()
		if token = resp.Msg.GetNextPageToken(); token == "" {
			return st, nil
		}
	}
}

// install replaces the copy with st, when st is newer, and reports the
// difference as changes.
func (s *Space) install(st *spaceState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st.rev < s.state.Load().rev {
		return
	}
	s.installLocked(st)
}

// replace replaces the copy with st whatever its revision (a snapshot of
// a restored store, whose revisions are another history's), and reports
// the difference as changes.
func (s *Space) replace(st *spaceState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.installLocked(st)
}

// installLocked replaces the copy with st and reports the difference as
// changes. The caller holds mu.
func (s *Space) installLocked(st *spaceState) {
	old := s.state.Load()
	var changes []Change
	for k, e := range st.entries {
		// A restored store may reuse a revision with other content: the
		// value is compared too.
		if prev, ok := old.entries[k]; !ok || prev.ModRevision != e.ModRevision || !bytes.Equal(prev.Value, e.Value) {
			changes = append(changes, Change{Key: k, Value: e.Value, Revision: e.ModRevision})
		}
	}
	for k := range old.entries {
		if _, ok := st.entries[k]; !ok {
			changes = append(changes, Change{Key: k, Deleted: true, Revision: st.rev})
		}
	}
	sort.Slice(changes, func(i, j int) bool {
		if changes[i].Revision != changes[j].Revision {
			return changes[i].Revision < changes[j].Revision
		}
		return changes[i].Key < changes[j].Key
	})
	s.state.Store(st)
	s.notifyLocked(changes)
}

// apply applies a batch of watch events in one new copy.
func (s *Space) apply(events []*pawlv1.Event) {
	if len(events) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.state.Load()
	next := &spaceState{rev: old.rev, entries: make(map[string]Entry, len(old.entries)+len(events))}
	for k, v := range old.entries {
		next.entries[k] = v
	}
	changes := make([]Change, 0, len(events))
	for _, ev := range events {
		kv := ev.GetKv()
		if kv.GetModRevision() <= old.rev {
			continue // already in the copy
		}
		if ev.GetType() == pawlv1.EventType_EVENT_TYPE_DELETE {
			delete(next.entries, kv.GetKey())
			changes = append(changes, Change{Key: kv.GetKey(), Deleted: true, Revision: kv.GetModRevision()})
		} else {
			next.entries[kv.GetKey()] = Entry{Key: kv.GetKey(), Value: kv.GetValue(), ModRevision: kv.GetModRevision()}
			changes = append(changes, Change{Key: kv.GetKey(), Value: kv.GetValue(), Revision: kv.GetModRevision()})
		}
		next.rev = max(next.rev, kv.GetModRevision())
	}
	s.state.Store(next)
	s.notifyLocked(changes)
}

// advance moves the copy's revision to rev (a progress notification: no
// change up to rev is missing).
func (s *Space) advance(rev int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.state.Load()
	if rev <= old.rev {
		return
	}
	s.state.Store(&spaceState{rev: rev, entries: old.entries})
	s.notifyLocked(nil)
}

// notifyLocked calls the subscribers and wakes revision waiters. The
// caller holds mu.
func (s *Space) notifyLocked(changes []Change) {
	for _, ch := range changes {
		for _, fn := range s.subs {
			fn(ch)
		}
	}
	close(s.advanced)
	s.advanced = make(chan struct{})
}

// saveToCache keeps the copy in the cache directory, if there is one.
func (s *Space) saveToCache() {
	if s.c.cache == nil {
		return
	}
	entries, rev := s.Entries()
	if rev == 0 {
		return
	}
	if err := s.c.cache.putSpace(cachedSpace{Prefix: s.prefix, Revision: rev, Entries: entries}); err != nil && !errors.Is(err, context.Canceled) {
		s.c.cfg.log.Warn("pawl: caching a space failed", "prefix", s.prefix, "error", err)
	}
}
