package boltstore

import (
	"fmt"
	"time"

	"github.com/pawlcfg/pawl/server/internal/store"
)

// Option configures Open.
type Option func(*options)

type options struct {
	maxBatch    int
	segmentSize int64
	applyDelay  time.Duration
	clock       func() time.Time
	fs          walFS
	noBoltSync  bool
	quota       store.Quota
	observe     store.CommitObserver
}

func defaultOptions() options {
	return options{
		// 256 writes per transaction keep one commit well under a few
		// milliseconds while amortising the fsync.
		maxBatch:    256,
		segmentSize: defaultSegmentSize,
		// bbolt gets the log's changes at most 10 ms late, unless a
		// read waits for them: few syncs of bbolt, reads not held up.
		applyDelay: 10 * time.Millisecond,
		clock:      time.Now,
		fs:         osFS{},
	}
}

func (o options) validate() error {
	if o.maxBatch <= 0 {
		return fmt.Errorf("boltstore: WithMaxBatch(%d): must be positive", o.maxBatch)
	}
	if err := o.quota.Validate(); err != nil {
		return fmt.Errorf("boltstore: WithQuota: %w", err)
	}
	return nil
}

// WithMaxBatch sets how many queued writes one transaction may group.
func WithMaxBatch(n int) Option { return func(o *options) { o.maxBatch = n } }

// WithQuota bounds the store's size (see store.Quota and Store.Usage):
// writes that would pass it are refused with a *store.QuotaError. The
// default is no quota.
func WithQuota(q store.Quota) Option { return func(o *options) { o.quota = q } }

// withClock replaces time.Now, which stamps each event, for tests.
func withClock(now func() time.Time) Option { return func(o *options) { o.clock = now } }

// withSegmentSize sets the size of the log's segments, for tests that
// fill several.
func withSegmentSize(n int64) Option { return func(o *options) { o.segmentSize = n } }

// withFS replaces the file system the write-ahead log uses, for tests that
// simulate a power cut.
func withFS(fsys walFS) Option { return func(o *options) { o.fs = fsys } }

// withoutBoltSync stops bbolt from syncing its file, for the power-cut
// tests: their cuts are of the log's simulated disk, and bbolt's file,
// on the real one, keeps whatever it was given.
func withoutBoltSync() Option { return func(o *options) { o.noBoltSync = true } }

// WithCommitObserver makes every put, delete and transaction report its
// commit time, and its error, to fn (see store.CommitObserver).
func WithCommitObserver(fn store.CommitObserver) Option { return func(o *options) { o.observe = fn } }
