package redisstore

import (
	"fmt"
	"time"

	"github.com/pawlcfg/pawl/server/internal/store"
)

// Option configures Open.
type Option func(*options)

type options struct {
	headCheck   time.Duration
	recordAge   time.Duration
	dropHook    func(revision int64) bool
	replicaAcks int
	replicaWait time.Duration
	name        string
	waitAOF     bool
	// acceptRollback accepts a recorded rollback at Open.
	acceptRollback bool
	quota          store.Quota
	observe        store.CommitObserver
}

const (
	// DefaultHeadCheck is how often the feed reads the head revision even
	// when no notice came: a lost last notice is found within it.
	DefaultHeadCheck = time.Second
	// DefaultRecordAge is how long a record without an expiry is kept
	// after its last write.
	DefaultRecordAge = 7 * 24 * time.Hour
)

func defaultOptions() options {
	return options{headCheck: DefaultHeadCheck, recordAge: DefaultRecordAge}
}

func (o options) validate() error {
	switch {
	case o.headCheck <= 0:
		return fmt.Errorf("redisstore: WithHeadCheck(%s): must be positive", o.headCheck)
	case o.recordAge <= 0:
		return fmt.Errorf("redisstore: WithRecordAge(%s): must be positive", o.recordAge)
	case o.waitAOF && o.replicaWait <= 0:
		return fmt.Errorf("redisstore: WithWaitAOF(%s): want a positive wait", o.replicaWait)
	case o.replicaAcks < 0 || (o.replicaAcks > 0 && o.replicaWait <= 0):
		return fmt.Errorf("redisstore: WithReplicaAcks(%d, %s): want 0, or a count and a positive wait", o.replicaAcks, o.replicaWait)
	}
	if err := o.quota.Validate(); err != nil {
		return fmt.Errorf("redisstore: WithQuota: %w", err)
	}
	return nil
}

// WithHeadCheck sets how often the feed reads the head revision without a
// notice (default DefaultHeadCheck).
func WithHeadCheck(d time.Duration) Option { return func(o *options) { o.headCheck = d } }

// WithRecordAge sets how long records without an expiry are kept (default
// DefaultRecordAge).
func WithRecordAge(d time.Duration) Option { return func(o *options) { o.recordAge = d } }

// WithNoticeFilter makes the feed ignore the pub/sub notices for which
// drop returns true, as if they were lost: for tests of recovery from the
// change log.
func WithNoticeFilter(drop func(revision int64) bool) Option {
	return func(o *options) { o.dropHook = drop }
}

// WithReplicaAcks makes every mutation wait, after the primary ran it,
// until n replicas have it (Redis WAIT), for at most wait: a write is
// acknowledged only once a failover (Sentinel or Cluster promoting a
// replica) can no longer lose it, provided n counts every replica a
// failover may promote. With fewer (one of two replicas, say), Sentinel
// may promote the replica that lacks the write: it picks by the
// replication offsets it last read, which can be a second old. When
// fewer replicas confirm in time, the mutation fails with
// store.ErrUnavailable; it is committed on the primary and may or may not
// survive a failover (if its revision was handed out and a failover loses
// it, the store finds that Redis went back in time). The default, 0,
// waits for none: Redis replication is asynchronous.
func WithReplicaAcks(n int, wait time.Duration) Option {
	return func(o *options) { o.replicaAcks, o.replicaWait = n, wait }
}

// WithName names this replica in what it records in Redis (the fault it
// finds); default a random name.
func WithName(name string) Option { return func(o *options) { o.name = name } }

// WithAcceptRollback makes Open accept a rollback that a replica found
// (Redis went back in time, or holds another data set; see
// store.ErrRolledBack): the store continues from what Redis holds, its
// revision counter jumps past the highest revision any replica reported
// handing out, and every watcher is told to take a snapshot. Store.Accepted
// says what was accepted. Without a recorded fault it does nothing.
func WithAcceptRollback() Option { return func(o *options) { o.acceptRollback = true } }

// WithWaitAOF makes every mutation wait, after Redis ran it, until Redis
// fsynced it to its own append-only file (Redis WAITAOF, 7.2 or later;
// with WithReplicaAcks, also until that many replicas fsynced it), for at
// most wait (which, given both, WithReplicaAcks's wait replaces): under
// appendfsync everysec, a write is then acknowledged only once a crash
// of the Redis host can no longer lose it. Open fails when Redis has no
// WAITAOF or appendonly is off; a write that is not fsynced in time fails
// with store.ErrUnavailable (committed in memory, and a crash may lose it).
func WithWaitAOF(wait time.Duration) Option {
	return func(o *options) {
		o.waitAOF = true
		if o.replicaWait == 0 {
			o.replicaWait = wait
		}
	}
}

// WithQuota bounds the store's size (see store.Quota and Store.Usage):
// writes that would pass it are refused with a *store.QuotaError. The
// size is counted in Redis, by the scripts that write, so every replica
// sees one count and one alarm; give every replica the same quota. The
// default is no quota (the size is counted all the same).
func WithQuota(q store.Quota) Option { return func(o *options) { o.quota = q } }

// WithCommitObserver makes every put, delete and transaction report its
// commit time, and its error, to fn (see store.CommitObserver).
func WithCommitObserver(fn store.CommitObserver) Option { return func(o *options) { o.observe = fn } }
