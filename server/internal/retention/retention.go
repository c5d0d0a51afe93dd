// Package retention keeps the change log to a policy: at most a number of
// revisions, and none older than an age. It sits above the storage
// engines, which only know how to compact to a revision (store.Compact)
// and which revision a time falls on (store.RevisionAt), so that every
// engine keeps the same history and, with a shared engine, one server
// compacts for all.
package retention

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/pawlcfg/pawl/server/internal/store"
)

// Policy is how much of the change log to keep. A zero field is no limit.
type Policy struct {
	// Revisions is how many of the newest revisions to keep.
	Revisions int64
	// Age is how long to keep a revision.
	Age time.Duration
}

// Defaults: enough for a watcher that was away for a while to catch up
// without a snapshot, small enough to keep the store bounded.
const (
	DefaultRevisions = 100_000
	DefaultAge       = 7 * 24 * time.Hour
)

// Target is the revision the policy compacts to at now, or the store's
// compact revision when nothing is due.
func Target(ctx context.Context, st store.Store, p Policy, now time.Time) (int64, error) {
	status, err := st.Status(ctx)
	if err != nil {
		return 0, err
	}
	target := status.CompactRevision
	if p.Revisions > 0 {
		target = max(target, status.Revision-p.Revisions)
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
// holds a tenth more revisions than the policy keeps. The writes carry
// ctx, so a fence in ctx (store.WithFence) guards them. Its exit is ctx.
func (c *Compactor) Run(ctx context.Context) {
	due := make(chan struct{}, 1)
	slack := max(c.p.Revisions/10, 1)
	var last atomic.Int64 // the compact revision last applied
	unsubscribe := c.st.Subscribe(func(events []store.Event) {
		if c.p.Revisions <= 0 || len(events) == 0 {
			return
		}
		if events[len(events)-1].Revision()-last.Load() > c.p.Revisions+slack {
			select {
			case due <- struct{}{}:
			default:
			}
		}
	})
	defer unsubscribe()
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-due:
		}
		compacted, err := Apply(ctx, c.st, c.p, c.now())
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("change log compaction failed", "error", err)
			}
			continue
		}
		last.Store(compacted)
	}
}
