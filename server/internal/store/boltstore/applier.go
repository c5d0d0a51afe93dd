package boltstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/pawlcfg/pawl/server/internal/store"
)

// compactStepsPerTx bounds how many log entries one transaction compacts, so
// that compaction never holds the applier for long: a long backlog is
// worked off over several transactions.
const compactStepsPerTx = 4096

// maxApplyEvents bounds how many events one bbolt transaction applies.
const maxApplyEvents = 16384

// compaction is a request to the applier to compact up to a revision.
type compaction struct {
	to  int64
	res chan error // buffered(1)
}

// runApplier writes into bbolt, in order, the changes the writer has made
// durable in the log, as many groups per transaction as are waiting, and
// runs compactions between them. Its exit is the writer closing the queue
// (after the last group it committed); it applies everything before that.
func (s *Store) runApplier() {
	defer s.wg.Done()
	var batch []store.Event
	for {
		select {
		case evs, ok := <-s.applyQueue:
			if !ok {
				return
			}
			batch = append(batch[:0], evs...)
			// Gather groups for a while, unless a read is waiting: each
			// bbolt transaction syncs, and its syncs delay the log's.
			timer := time.NewTimer(s.opts.applyDelay)
		more:
			for len(batch) < maxApplyEvents {
				select {
				case evs, ok := <-s.applyQueue:
					if !ok {
						break more
					}
					batch = append(batch, evs...)
				case <-s.readWaiting:
					break more
				case <-timer.C:
					break more
				}
			}
			timer.Stop()
			// Whatever else is queued goes in too.
		rest:
			for len(batch) < maxApplyEvents {
				select {
				case evs, ok := <-s.applyQueue:
					if !ok {
						break rest
					}
					batch = append(batch, evs...)
				default:
					break rest
				}
			}
			s.apply(batch)
			clear(batch)
		case c := <-s.compactions:
			c.res <- s.compact(c.to)
		}
	}
}

// apply writes events into bbolt in one transaction, then lets the log go
// of them. After a failure nothing more is applied, and reads fail: they
// could no longer see every acknowledged write.
func (s *Store) apply(events []store.Event) {
	if s.failure() != nil {
		return
	}
	if err := s.db.Update(func(tx *bolt.Tx) error { return writeEvents(tx, events) }); err != nil {
		s.fail(fmt.Errorf("boltstore: apply: %w", err))
		return
	}
	s.measure() // before the events' cost is let go: the size never dips
	s.usage.unapplied.Add(-eventsCost(events))
	last := events[len(events)-1].Revision()
	if err := s.log.release(last); err != nil {
		s.fail(err)
	}
	s.setApplied(last)
}

// compact compacts bbolt's log up to revision to, at most
// compactStepsPerTx entries.
func (s *Store) compact(to int64) error {
	if err := s.failure(); err != nil {
		return err
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		st := readStatus(tx)
		return compactTo(tx, &st, to, compactStepsPerTx)
	})
	if err != nil {
		return fmt.Errorf("boltstore: compact: %w", err)
	}
	s.measure() // the pages compaction freed lower the size
	return nil
}

// writeEvents writes decided events into bbolt: each key's record, the
// change log and its index, and the revision. The keys and values it
// puts are cut from one buffer, not allocated one by one (the key, the
// record, the log entry, the revision and index keys: five per put):
// bbolt keeps them only until the transaction ends.
func writeEvents(tx *bolt.Tx, events []store.Event) error {
	kvb := tx.Bucket(bucketKV)
	log, idx := logBuckets(tx)
	size := 0
	for _, ev := range events {
		size += len(ev.KV.Key) + 8 + eventLen(ev) + len(ev.KV.Key) + 9
		if ev.Type != store.EventDelete {
			size += recordLen(ev.KV)
		}
	}
	buf := make([]byte, 0, size)
	// cut returns what the append since start added, as a slice of its
	// own (appends after it never reach into it).
	cut := func(start int) []byte { return buf[start:len(buf):len(buf)] }
	for _, ev := range events {
		start := len(buf)
		buf = append(buf, ev.KV.Key...)
		key := cut(start)
		var err error
		if ev.Type == store.EventDelete {
			err = kvb.Delete(key)
		} else {
			start = len(buf)
			buf = appendRecord(buf, ev.KV)
			err = kvb.Put(key, cut(start))
		}
		if err != nil {
			return err
		}
		rev := ev.Revision()
		start = len(buf)
		buf = binary.BigEndian.AppendUint64(buf, uint64(rev))
		revk := cut(start)
		start = len(buf)
		buf = appendEvent(buf, ev)
		if err := log.Put(revk, cut(start)); err != nil {
			return err
		}
		start = len(buf)
		buf = appendIdxKey(buf, ev.KV.Key, rev)
		if err := idx.Put(cut(start), nil); err != nil {
			return err
		}
	}
	return tx.Bucket(bucketMeta).Put(metaRev, revKey(events[len(events)-1].Revision()))
}

// setApplied records that bbolt holds every change up to rev and wakes the
// reads waiting for it.
func (s *Store) setApplied(rev int64) {
	s.appliedMu.Lock()
	s.applied.Store(rev)
	close(s.appliedCh)
	s.appliedCh = make(chan struct{})
	s.appliedMu.Unlock()
}

// waitApplied waits until bbolt holds every change up to rev: a read then
// sees every write acknowledged before it began.
func (s *Store) waitApplied(ctx context.Context, rev int64) error {
	for {
		if err := s.failure(); err != nil {
			return err // reads stop with writes: the store's state is in doubt
		}
		if s.applied.Load() >= rev {
			return nil
		}
		s.appliedMu.Lock()
		ch := s.appliedCh
		done := s.applied.Load() >= rev
		s.appliedMu.Unlock()
		if done {
			return nil
		}
		select { // the applier stops gathering and writes now
		case s.readWaiting <- struct{}{}:
		default:
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.failed:
		case <-s.ctx.Done():
			return store.ErrClosed
		}
	}
}

// fail records the first failure that stops the store, and returns the
// error writes and reads get from then on.
func (s *Store) fail(err error) error {
	s.failOnce.Do(func() {
		s.failErr = fmt.Errorf("boltstore: stopped after a failure; restart to recover from the log: %w", err)
		close(s.failed)
	})
	return s.failErr
}

// failure returns the error of the failure that stopped the store, or nil.
func (s *Store) failure() error {
	select {
	case <-s.failed:
		return s.failErr
	default:
		return nil
	}
}
