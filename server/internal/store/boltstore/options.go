package boltstore

import (
	"fmt"
	"time"
)

// Option configures Open.
type Option func(*options)

type options struct {
	maxBatch int
	clock    func() time.Time
}

func defaultOptions() options {
	return options{
		// 256 writes per transaction keep one commit well under a few
		// milliseconds while amortising the fsync.
		maxBatch: 256,
		clock:    time.Now,
	}
}

func (o options) validate() error {
	if o.maxBatch <= 0 {
		return fmt.Errorf("boltstore: WithMaxBatch(%d): must be positive", o.maxBatch)
	}
	return nil
}

// WithMaxBatch sets how many queued writes one transaction may group.
func WithMaxBatch(n int) Option { return func(o *options) { o.maxBatch = n } }

// withClock replaces time.Now, which stamps each event, for tests.
func withClock(now func() time.Time) Option { return func(o *options) { o.clock = now } }
