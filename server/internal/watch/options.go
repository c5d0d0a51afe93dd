package watch

import (
	"fmt"
	"time"
)

// Option configures New.
type Option func(*options)

type options struct {
	ringEvents       int
	ringBytes        int
	maxBatch         int
	catchUpBatch     int
	progressInterval time.Duration
}

func defaultOptions() options {
	return options{
		// 4096 events cover a burst of several seconds of writes at the
		// rates a config store sees, so a watcher that stalls briefly
		// catches up from memory, not from disk.
		ringEvents: 4096,
		// 64 MiB bounds the ring when values are large (up to 1 MiB each).
		ringBytes: 64 << 20,
		// 128 events per message keep one stream message well under the
		// default 4 MiB receive limit of gRPC clients for typical values.
		maxBatch: 128,
		// One change-log read per catch-up step: 512 revisions scanned.
		catchUpBatch:     512,
		progressInterval: 10 * time.Second,
	}
}

func (o options) validate() error {
	switch {
	case o.ringEvents <= 0:
		return fmt.Errorf("watch: WithRingEvents(%d): must be positive", o.ringEvents)
	case o.ringBytes <= 0:
		return fmt.Errorf("watch: WithRingBytes(%d): must be positive", o.ringBytes)
	case o.maxBatch <= 0:
		return fmt.Errorf("watch: WithMaxBatch(%d): must be positive", o.maxBatch)
	case o.catchUpBatch <= 0:
		return fmt.Errorf("watch: WithCatchUpBatch(%d): must be positive", o.catchUpBatch)
	case o.progressInterval <= 0:
		return fmt.Errorf("watch: WithProgressInterval(%s): must be positive", o.progressInterval)
	}
	return nil
}

// WithRingEvents sets how many recent events the hub keeps in memory.
func WithRingEvents(n int) Option { return func(o *options) { o.ringEvents = n } }

// WithRingBytes bounds the memory of the ring by key and value bytes.
func WithRingBytes(n int) Option { return func(o *options) { o.ringBytes = n } }

// WithMaxBatch sets the largest number of events Next returns at once.
func WithMaxBatch(n int) Option { return func(o *options) { o.maxBatch = n } }

// WithCatchUpBatch sets how many revisions one change-log read examines.
func WithCatchUpBatch(n int) Option { return func(o *options) { o.catchUpBatch = n } }

// WithProgressInterval sets how often idle watchers get a progress
// notification (default 10s).
func WithProgressInterval(d time.Duration) Option { return func(o *options) { o.progressInterval = d } }
