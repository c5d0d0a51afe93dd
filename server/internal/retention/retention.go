// Package retention keeps the change log to a policy: at most a number of
// revisions, and none older than an age. It sits above the storage
// engines, which only know how to compact to a revision (store.Compact)
// and which revision a time falls on (store.RevisionAt), so that every
// engine keeps the same history and, with a shared engine, one server
// compacts for all.
package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pawlcfg/pawl/server/internal/store"
)

// Policy is how much of the change log to keep. A zero field is no limit.
type Policy struct {
	// Revisions is how many of the newest counted revisions to keep: every
	// revision counts except those whose changes all fall under Uncounted.
	Revisions int64
	// Age is how long to keep a revision.
	Age time.Duration
	// Uncounted are key prefixes whose revisions do not count toward
	// Revisions: records written in bulk (an instance's reports) that no
	// watcher resumes from, so that a fleet reporting on a release does not
	// use up the history that watchers and assignment streams resume from.
	Uncounted []string
	// LogRevisions is how many of the newest revisions, counted or not, to
	// keep at most: the bound on the log's size that Uncounted revisions
	// would otherwise escape.
	LogRevisions int64
}

// Defaults: enough for a watcher that was away for a while to catch up
// without a snapshot, small enough to keep the store bounded.
const (
	DefaultRevisions    = 100_000
	DefaultAge          = 7 * 24 * time.Hour
	DefaultLogRevisions = 10 * DefaultRevisions
)

// counts reports whether a committed revision counts toward
// Policy.Revisions: whether any of its changes falls outside Uncounted.
func (p Policy) counts(events []store.Event) bool {
	for _, e := range events {
		if !slices.ContainsFunc(p.Uncounted, func(prefix string) bool { return strings.HasPrefix(e.KV.Key, prefix) }) {
			return true
		}
	}
	return false
}

// counted remembers the newest Policy.Revisions counted revisions, oldest
// first, in a ring: the Revisions-th newest is the oldest to keep.
type counted struct {
	ring []int64
	next int  // where the next revision goes
	full bool // every slot holds a revision
	last int64
}

func newCounted(n int64) *counted { return &counted{ring: make([]int64, n)} }

// reset forgets every revision added.
func (c *counted) reset() { c.next, c.full, c.last = 0, false, 0 }

// add records one committed revision that counts; revisions at or below
// the last one added are ignored, so a feed and a scan may overlap.
func (c *counted) add(rev int64) {
	if rev <= c.last {
		return
	}
	c.last = rev
	c.ring[c.next] = rev
	c.next++
	if c.next == len(c.ring) {
		c.next, c.full = 0, true
	}
}

// target is the revision below the oldest one to keep, and whether as
// many as the ring holds have been seen (else nothing is due).
func (c *counted) target() (int64, bool) {
	if !c.full {
		return 0, false
	}
	return c.ring[c.next] - 1, true
}

// scanPage is how many revisions one read of the change log examines when
// counting.
const scanPage = 4096

// scan feeds c the counted revisions of the log after from through to.
func scan(ctx context.Context, st store.Store, p Policy, c *counted, from, to int64) error {
	for from < to {
		ch, err := st.Changes(ctx, from+1, "", scanPage)
		var compacted *store.CompactedError
		if errors.As(err, &compacted) && compacted.CompactRevision > from {
			// Compacted meanwhile (by another compactor): what is gone
			// needs no counting.
			from = compacted.CompactRevision
			continue
		}
		if err != nil {
			return fmt.Errorf("count revisions after %d: %w", from, err)
		}
		for batch := range byRevision(ch.Events) {
			if batch[0].Revision() <= to && p.counts(batch) {
				c.add(batch[0].Revision())
			}
		}
		if ch.Through <= from {
			return fmt.Errorf("count revisions after %d: the log read made no progress", from)
		}
		from = ch.Through
	}
	return nil
}

// byRevision yields events grouped by revision (a transaction is one
// revision of several events).
func byRevision(events []store.Event) func(yield func([]store.Event) bool) {
	return func(yield func([]store.Event) bool) {
		for i := 0; i < len(events); {
			j := i + 1
			for j < len(events) && events[j].Revision() == events[i].Revision() {
				j++
			}
			if !yield(events[i:j]) {
				return
			}
			i = j
		}
	}
}

// logFloor is what the log's bound alone compacts to: the compact
// revision, or LogRevisions below the head if that is later. Counting
// starts there, since nothing below it is kept.
func (p Policy) logFloor(status store.Status) int64 {
	if p.LogRevisions > 0 {
		return max(status.CompactRevision, status.Revision-p.LogRevisions)
	}
	return status.CompactRevision
}

// Target is the revision the policy compacts to at now, or the store's
// compact revision when nothing is due. With Uncounted prefixes it reads
// the retained log (at most LogRevisions of it) to count.
func Target(ctx context.Context, st store.Store, p Policy, now time.Time) (int64, error) {
	status, err := st.Status(ctx)
	if err != nil {
		return 0, err
	}
	var c *counted
	if p.Revisions > 0 && len(p.Uncounted) > 0 {
		c = newCounted(p.Revisions)
		if err := scan(ctx, st, p, c, p.logFloor(status), status.Revision); err != nil {
			return 0, err
		}
	}
	var countedTarget func() (int64, bool)
	if c != nil {
		countedTarget = c.target
	}
	return p.target(ctx, st, status, countedTarget, now)
}

// target combines the policy's limits; countedTarget, when the policy has
// Uncounted prefixes, gives the target of the count of revisions.
func (p Policy) target(ctx context.Context, st store.Store, status store.Status, countedTarget func() (int64, bool), now time.Time) (int64, error) {
	target := p.logFloor(status)
	if p.Revisions > 0 {
		if countedTarget == nil {
			target = max(target, status.Revision-p.Revisions)
		} else if t, ok := countedTarget(); ok {
			target = max(target, t)
		}
	}
	if p.Age > 0 {
		old, err := st.RevisionAt(ctx, now.Add(-p.Age))
		if err != nil {
			return 0, err
		}
		target = max(target, old)
	}
	return target, nil
}

// Apply compacts st to what the policy keeps at now, and returns the
// compact revision.
func Apply(ctx context.Context, st store.Store, p Policy, now time.Time) (int64, error) {
	target, err := Target(ctx, st, p, now)
	if err != nil {
		return 0, fmt.Errorf("retention: %w", err)
	}
	if err := st.Compact(ctx, target); err != nil {
		return 0, fmt.Errorf("retention: compact to %d: %w", target, err)
	}
	return target, nil
}

// Compactor applies a policy as the store grows: when a commit takes the
// log past the revision limit by a tenth, and on every tick for the age.
type Compactor struct {
	st       store.Store
	p        Policy
	interval time.Duration
	now      func() time.Time
	log      *slog.Logger
}

// Option configures NewCompactor.
type Option func(*Compactor)

// WithInterval sets how often the age limit is applied (default a second).
func WithInterval(d time.Duration) Option { return func(c *Compactor) { c.interval = d } }

// WithClock replaces time.Now, for tests.
func WithClock(now func() time.Time) Option { return func(c *Compactor) { c.now = now } }

// WithLogger sets where failed compactions are logged.
func WithLogger(log *slog.Logger) Option { return func(c *Compactor) { c.log = log } }

// NewCompactor returns a compactor of st to p; Run runs it.
func NewCompactor(st store.Store, p Policy, opts ...Option) *Compactor {
	c := &Compactor{st: st, p: p, interval: time.Second, now: time.Now, log: slog.Default()}
	for _, opt := range opts {
		opt(c)
	}
	return c
}

// Run compacts until ctx ends: at every interval, and as soon as the log
// holds a tenth more revisions than the policy keeps. With Uncounted
// prefixes it counts the retained log once, then follows the store's feed.
// The writes carry ctx, so a fence in ctx (store.WithFence) guards them.
// Its exit is ctx.
func (c *Compactor) Run(ctx context.Context) {
	due := make(chan struct{}, 1)
	wake := func() {
		select {
		case due <- struct{}{}:
		default:
		}
	}
	slack, logSlack := max(c.p.Revisions/10, 1), max(c.p.LogRevisions/10, 1)
	var last atomic.Int64 // the compact revision last applied
	f := &follower{p: c.p}
	if c.p.Revisions > 0 && len(c.p.Uncounted) > 0 {
		f.counted = newCounted(c.p.Revisions)
	}
	counting := f.counted != nil
	unsubscribe := c.st.Subscribe(func(events []store.Event) {
		if len(events) == 0 {
			return
		}
		newest := events[len(events)-1].Revision()
		if c.p.LogRevisions > 0 && newest-last.Load() > c.p.LogRevisions+logSlack {
			wake()
		}
		switch {
		case c.p.Revisions <= 0:
		case !counting:
			if newest-last.Load() > c.p.Revisions+slack {
				wake()
			}
		case f.follow(events) > slack:
			wake()
		}
	})
	defer unsubscribe()
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		if err := f.seed(ctx, c.st); err != nil && ctx.Err() == nil {
			c.log.Warn("change log compaction cannot count the log", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-due:
		}
		compacted, err := c.apply(ctx, f)
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("change log compaction failed", "error", err)
			}
			continue
		}
		last.Store(compacted)
	}
}

// apply compacts to the policy's target, counting with what f has seen.
func (c *Compactor) apply(ctx context.Context, f *follower) (int64, error) {
	status, err := c.st.Status(ctx)
	if err != nil {
		return 0, fmt.Errorf("retention: %w", err)
	}
	target, err := c.p.target(ctx, c.st, status, f.target(), c.now())
	if err != nil {
		return 0, fmt.Errorf("retention: %w", err)
	}
	if err := c.st.Compact(ctx, target); err != nil {
		return 0, fmt.Errorf("retention: compact to %d: %w", target, err)
	}
	return target, nil
}

// follower keeps a compactor's count of counted revisions: a scan of the
// retained log once (seed), then the store's feed (follow). What the feed
// brings before the scan is done waits in pending.
type follower struct {
	p       Policy
	mu      sync.Mutex
	counted *counted // nil when every revision counts
	seeded  bool
	pending []int64
	added   int64 // counted revisions followed since the last target
}

// follow counts the feed's batch and returns how many counted revisions
// came since the last target was taken.
func (f *follower) follow(events []store.Event) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	for batch := range byRevision(events) {
		if !f.p.counts(batch) {
			continue
		}
		if f.seeded {
			f.counted.add(batch[0].Revision())
		} else {
			f.pending = append(f.pending, batch[0].Revision())
		}
		f.added++
	}
	return f.added
}

// seed counts the retained log once, unless it has or nothing needs
// counting.
func (f *follower) seed(ctx context.Context, st store.Store) error {
	f.mu.Lock()
	done := f.counted == nil || f.seeded
	f.mu.Unlock()
	if done {
		return nil
	}
	status, err := st.Status(ctx)
	if err != nil {
		return err
	}
	from := f.p.logFloor(status)
	// Only seed touches the count until seeded is set; follow queues.
	if err := scan(ctx, st, f.p, f.counted, from, status.Revision); err != nil {
		f.counted.reset() // counted from scratch on the next try
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, rev := range f.pending {
		f.counted.add(rev)
	}
	f.pending, f.seeded = nil, true
	return nil
}

// target returns the counted target for Policy.target: nil when every
// revision counts, else the target once enough counted revisions are known.
func (f *follower) target() func() (int64, bool) {
	if f.counted == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.added = 0
	if !f.seeded {
		return func() (int64, bool) { return 0, false }
	}
	t, ok := f.counted.target()
	return func() (int64, bool) { return t, ok }
}
