package boltstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/pawlcfg/pawl/server/internal/store"
)

// compactStepsPerTx bounds how many log entries one transaction compacts, so
// that compaction never holds the writer for long: a long backlog is worked
// off over several transactions.
const compactStepsPerTx = 4096

// request is one queued write. Exactly one of put, del, txn and compactTo
// is set.
type request struct {
	ctx       context.Context
	put       *store.Put
	del       *store.Delete
	txn       *store.Txn
	compactTo int64
	res       chan response // buffered(1): the writer never blocks on it
}

type response struct {
	result store.Result
	err    error
}

// submit queues r for the writer and waits for its answer.
func (s *Store) submit(ctx context.Context, r *request) (store.Result, error) {
	if err := ctx.Err(); err != nil {
		return store.Result{}, err
	}
	r.res = make(chan response, 1)
	select {
	case s.requests <- r:
	case <-s.ctx.Done():
		return store.Result{}, store.ErrClosed
	case <-ctx.Done():
		return store.Result{}, ctx.Err()
	}
	// Once queued, wait for the answer even if ctx ends: the write may
	// already be committing, and the caller must learn whether it did.
	select {
	case res := <-r.res:
		return res.result, res.err
	case <-s.done:
		select {
		case res := <-r.res:
			return res.result, res.err
		default:
			return store.Result{}, store.ErrClosed
		}
	}
}

// runWriter is the only goroutine that writes. Its exit is Close cancelling
// s.ctx; it then answers every queued request with ErrClosed.
func (s *Store) runWriter() {
	defer s.wg.Done()
	defer close(s.done)
	batch := make([]*request, 0, s.opts.maxBatch)
	for {
		select {
		case <-s.ctx.Done():
			for {
				select {
				case r := <-s.requests:
					r.res <- response{err: store.ErrClosed}
				default:
					return
				}
			}
		case r := <-s.requests:
			batch = append(batch[:0], r)
		drain:
			for len(batch) < cap(batch) {
				select {
				case r := <-s.requests:
					batch = append(batch, r)
				default:
					break drain
				}
			}
			s.commit(batch)
		}
	}
}

// commit applies batch in one transaction, tells subscribers, then answers.
func (s *Store) commit(batch []*request) {
	results := make([]response, len(batch))
	var events []store.Event
	err := s.db.Update(func(tx *bolt.Tx) error {
		events = events[:0]
		st := readStatus(tx)
		now := s.opts.clock()
		for i, r := range batch {
			if err := r.ctx.Err(); err != nil {
				results[i] = response{err: err}
				continue
			}
			var ev *store.Event
			var evs []store.Event
			var err error
			switch {
			case r.put != nil:
				ev, results[i], err = applyPut(tx, r.put, st.Revision+1, now, false)
			case r.del != nil:
				ev, results[i], err = applyDelete(tx, r.del, st.Revision+1, now, false)
			case r.txn != nil:
				evs, results[i], err = applyTxn(tx, r.txn, st, now)
			default:
				err = compactTo(tx, &st, r.compactTo, compactStepsPerTx)
			}
			if err != nil {
				return err
			}
			if ev != nil {
				evs = append(evs, *ev)
			}
			st.Revision += int64(len(evs))
			events = append(events, evs...)
		}
		if len(events) > 0 {
			if err := tx.Bucket(bucketMeta).Put(metaRev, revKey(st.Revision)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		err = fmt.Errorf("boltstore: commit: %w", err)
		for i := range results {
			results[i] = response{err: err}
		}
		events = nil
	}
	if len(events) > 0 {
		s.subMu.Lock()
		for _, fn := range s.subs {
			fn(events)
		}
		s.subMu.Unlock()
	}
	for i, r := range batch {
		r.res <- results[i]
	}
}

// applyPut writes one put at revision rev, or returns its CAS failure in the
// response. It returns a nil event when nothing was written. more marks a
// change of a transaction that more changes follow (store.Event.More).
func applyPut(tx *bolt.Tx, p *store.Put, rev int64, now time.Time, more bool) (*store.Event, response, error) {
	kvb := tx.Bucket(bucketKV)
	prev, err := currentRecord(kvb, p.Key)
	if err != nil {
		return nil, response{}, err
	}
	if mismatch := checkExpected(p.Key, p.ExpectModRevision, prev); mismatch != nil {
		return nil, response{err: mismatch}, nil
	}
	kv := store.KeyValue{Key: p.Key, Value: p.Value, CreateRevision: rev, ModRevision: rev, Version: 1}
	ev := store.Event{Type: store.EventPut, KV: kv, Time: now, More: more}
	if prev != nil {
		ev.KV.CreateRevision = prev.CreateRevision
		ev.KV.Version = prev.Version + 1
		ev.PrevRevision = prev.ModRevision
	}
	if err := kvb.Put([]byte(p.Key), encodeRecord(ev.KV)); err != nil {
		return nil, response{}, err
	}
	if err := appendLog(tx, ev); err != nil {
		return nil, response{}, err
	}
	return &ev, response{result: store.Result{Revision: rev, Prev: prev}}, nil
}

// applyDelete is applyPut for a deletion.
func applyDelete(tx *bolt.Tx, d *store.Delete, rev int64, now time.Time, more bool) (*store.Event, response, error) {
	kvb := tx.Bucket(bucketKV)
	prev, err := currentRecord(kvb, d.Key)
	if err != nil {
		return nil, response{}, err
	}
	if mismatch := checkExpected(d.Key, d.ExpectModRevision, prev); mismatch != nil {
		return nil, response{err: mismatch}, nil
	}
	if prev == nil {
		return nil, response{err: &store.NotFoundError{Key: d.Key, Revision: rev - 1}}, nil
	}
	ev := store.Event{
		Type:         store.EventDelete,
		KV:           store.KeyValue{Key: d.Key, ModRevision: rev},
		PrevRevision: prev.ModRevision,
		Time:         now,
		More:         more,
	}
	if err := kvb.Delete([]byte(d.Key)); err != nil {
		return nil, response{}, err
	}
	if err := appendLog(tx, ev); err != nil {
		return nil, response{}, err
	}
	return &ev, response{result: store.Result{Revision: rev, Prev: prev}}, nil
}

// applyTxn checks every compare and unchanged condition against st (the
// store as of the previous request of the batch), then writes the puts at
// revisions st.Revision+1, +2, ... A failed condition is the response's
// error and writes nothing.
func applyTxn(tx *bolt.Tx, t *store.Txn, st store.Status, now time.Time) ([]store.Event, response, error) {
	rev := st.Revision + 1
	kvb := tx.Bucket(bucketKV)
	for _, c := range t.Compares {
		cur, err := currentRecord(kvb, c.Key)
		if err != nil {
			return nil, response{}, err
		}
		expect := c.ModRevision
		if mismatch := checkExpected(c.Key, &expect, cur); mismatch != nil {
			return nil, response{err: mismatch}, nil
		}
	}
	changed, err := firstChange(tx, t.Unchanged, st)
	if err != nil {
		return nil, response{}, err
	}
	if changed != nil {
		return nil, response{err: changed}, nil
	}
	// The deletes of absent keys are skipped, so the changes are known
	// before any is written: every one but the last says More. (No key
	// appears twice, so the puts do not change which deletes apply.)
	var deletes []string
	for _, key := range t.Deletes {
		if kvb.Get([]byte(key)) != nil {
			deletes = append(deletes, key)
		}
	}
	changes := len(t.Puts) + len(deletes)
	events := make([]store.Event, 0, changes)
	for i := range t.Puts {
		p := t.Puts[i]
		p.ExpectModRevision = nil
		ev, _, err := applyPut(tx, &p, rev+int64(len(events)), now, len(events)+1 < changes)
		if err != nil {
			return nil, response{}, err
		}
		events = append(events, *ev)
	}
	for _, key := range deletes {
		ev, _, err := applyDelete(tx, &store.Delete{Key: key}, rev+int64(len(events)), now, len(events)+1 < changes)
		if err != nil {
			return nil, response{}, err
		}
		events = append(events, *ev)
	}
	return events, response{result: store.Result{Revision: rev + int64(len(events)) - 1}}, nil
}

// firstChange returns the first unchanged condition that fails, reading the
// change log after the earliest revision any of them names. The log holds
// the batch's earlier writes too: they are in the same bolt transaction.
func firstChange(tx *bolt.Tx, conds []store.Unchanged, st store.Status) (*store.ChangedError, error) {
	if len(conds) == 0 {
		return nil, nil
	}
	since := conds[0].Since
	for _, u := range conds {
		if u.Since < st.CompactRevision {
			return &store.ChangedError{Prefix: u.Prefix, Since: u.Since, Revision: st.CompactRevision}, nil
		}
		since = min(since, u.Since)
	}
	c := tx.Bucket(bucketLog).Cursor()
	for k, v := c.Seek(revKey(since + 1)); k != nil; k, v = c.Next() {
		rev := decodeRev(k)
		_, key, err := eventKey(v)
		if err != nil {
			return nil, fmt.Errorf("boltstore: log revision %d: %w", rev, err)
		}
		for _, u := range conds {
			if rev > u.Since && strings.HasPrefix(key, u.Prefix) {
				return &store.ChangedError{Prefix: u.Prefix, Since: u.Since, Key: key, Revision: rev}, nil
			}
		}
	}
	return nil, nil
}

func currentRecord(kvb *bolt.Bucket, key string) (*store.KeyValue, error) {
	v := kvb.Get([]byte(key))
	if v == nil {
		return nil, nil
	}
	kv, err := decodeRecord(key, v)
	if err != nil {
		return nil, err
	}
	return &kv, nil
}

func checkExpected(key string, expect *int64, prev *store.KeyValue) error {
	if expect == nil {
		return nil
	}
	var actual int64
	if prev != nil {
		actual = prev.ModRevision
	}
	if actual != *expect {
		return &store.RevisionMismatchError{Key: key, Expected: *expect, Actual: actual}
	}
	return nil
}

func appendLog(tx *bolt.Tx, ev store.Event) error {
	rev := ev.Revision()
	if err := tx.Bucket(bucketLog).Put(revKey(rev), encodeEvent(ev)); err != nil {
		return err
	}
	return tx.Bucket(bucketIdx).Put(idxKey(ev.KV.Key, rev), nil)
}
