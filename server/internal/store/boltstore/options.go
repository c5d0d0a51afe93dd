package boltstore

import (
	"fmt"
	"time"
)

// Option configures Open.
type Option func(*options)

type options struct {
	maxEntries      int64
	maxAge          time.Duration
	compactInterval time.Duration
	maxBatch        int
	clock           func() time.Time
}

// DefaultMaxEntries is how many revisions the change log keeps by default:
// enough for a watcher that was away for a while to catch up without a
// snapshot, small enough to keep the file bounded.
const DefaultMaxEntries = 100_000

// DefaultMaxAge is how long the change log keeps a revision by default.
const DefaultMaxAge = 7 * 24 * time.Hour

func defaultOptions() options {
	return options{
		maxEntries:      DefaultMaxEntries,
		maxAge:          DefaultMaxAge,
		compactInterval: time.Minute,
		// 256 writes per transaction keep one commit well under a few
		// milliseconds while amortising the fsync.
		maxBatch: 256,
		clock:    time.Now,
	}
}

func (o options) validate() error {
	switch {
	case o.maxEntries < 0:
		return fmt.Errorf("boltstore: WithMaxEntries(%d): must be 0 (no limit) or positive", o.maxEntries)
	case o.maxAge < 0:
		return fmt.Errorf("boltstore: WithMaxAge(%s): must be 0 (no limit) or positive", o.maxAge)
	case o.compactInterval <= 0:
		return fmt.Errorf("boltstore: WithCompactInterval(%s): must be positive", o.compactInterval)
	case o.maxBatch <= 0:
		return fmt.Errorf("boltstore: WithMaxBatch(%d): must be positive", o.maxBatch)
	}
	return nil
}

// WithMaxEntries keeps at most n revisions in the change log; older ones are
// compacted as new ones are written. 0 means no count limit.
func WithMaxEntries(n int64) Option { return func(o *options) { o.maxEntries = n } }

// WithMaxAge compacts change-log revisions older than d. 0 means no age limit.
func WithMaxAge(d time.Duration) Option { return func(o *options) { o.maxAge = d } }

// WithCompactInterval sets how often the age limit is applied (default one
// minute).
func WithCompactInterval(d time.Duration) Option { return func(o *options) { o.compactInterval = d } }

// WithMaxBatch sets how many queued writes one transaction may group.
func WithMaxBatch(n int) Option { return func(o *options) { o.maxBatch = n } }

// withClock replaces time.Now, for tests of age-based compaction.
func withClock(now func() time.Time) Option { return func(o *options) { o.clock = now } }
