package boltstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/pawlcfg/pawl/server/internal/store"
)

// request is one queued write. Exactly one of put, del and txn is set.
type request struct {
	ctx context.Context
	put *store.Put
	del *store.Delete
	txn *store.Txn
	res chan response // buffered(1): the writer never blocks on it
}

type response struct {
	result store.Result
	err    error
}

// submit queues r for the writer and waits for its answer.
func (s *Store) submit(ctx context.Context, r *request) (_ store.Result, err error) {
	if observe := s.opts.observe; observe != nil {
		start := time.Now()
		defer func() { observe(time.Since(start), err) }()
	}
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

// runWriter is the only goroutine that decides writes. Its exit is Close
// cancelling s.ctx; it then answers every queued request with ErrClosed,
// and closes the applier's queue so that the applier finishes.
func (s *Store) runWriter() {
	defer s.wg.Done()
	defer close(s.applyQueue)
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

// commit decides batch against the current state (bbolt, with the changes
// the log holds and bbolt does not yet over it), appends its changes to the
// log as one synced record, tells subscribers, hands the changes to the
// applier, then answers.
func (s *Store) commit(batch []*request) {
	results := make([]response, len(batch))
	events, err := s.decide(batch, results)
	if err == nil && len(events) > 0 {
		if err = s.log.append(events); err != nil {
			// Whether the log holds the group is unknown, and after a
			// failed sync the file's state is too: stop writing.
			err = s.fail(err)
		}
	}
	if err != nil {
		for i := range results {
			results[i] = response{err: err}
		}
		events = nil
	}
	if len(events) > 0 {
		s.committed.Store(events[len(events)-1].Revision())
		s.subMu.Lock()
		for _, fn := range s.subs {
			fn(events)
		}
		s.subMu.Unlock()
		s.applyQueue <- events
	}
	for i, r := range batch {
		r.res <- results[i]
	}
}

// decide checks and turns each request of batch into events, in order, as
// of the state its predecessors left, filling results. The events are the
// group's changes, already in s.pending.
func (s *Store) decide(batch []*request, results []response) ([]store.Event, error) {
	if err := s.failure(); err != nil {
		return nil, err
	}
	s.pending.prune(s.applied.Load())
	tx, err := s.db.Begin(false) // after the prune: it holds at least what was pruned
	if err != nil {
		return nil, fmt.Errorf("boltstore: read: %w", err)
	}
	defer tx.Rollback()
	cur := &state{tx: tx, pending: &s.pending}
	st := readStatus(tx)
	st.Revision = s.committed.Load()
	now := s.opts.clock()
	var events []store.Event
	for i, r := range batch {
		if err := r.ctx.Err(); err != nil {
			results[i] = response{err: err}
			continue
		}
		cost, reserved := requestCost(s.opts.quota, r)
		if err := s.usage.admit(cost, reserved); err != nil {
			results[i] = response{err: err}
			continue
		}
		var evs []store.Event
		var err error
		switch {
		case r.put != nil:
			evs, results[i], err = decidePut(cur, r.put, st.Revision+1, now, false)
		case r.del != nil:
			evs, results[i], err = decideDelete(cur, r.del, st.Revision+1, now, false)
		default:
			evs, results[i], err = decideTxn(cur, r.txn, st, now)
		}
		if err != nil {
			// A read failed: the group's earlier changes are in pending
			// but not in the log, so the store cannot go on either.
			return nil, s.fail(err)
		}
		// What the log holds and bbolt not yet counts at its events'
		// cost (a deletion's too), not at what was admitted.
		s.usage.unapplied.Add(eventsCost(evs) - cost)
		st.Revision += int64(len(evs))
		events = append(events, evs...)
	}
	return events, nil
}

// pending is what the log holds and bbolt does not yet: the events in
// order, and each key's newest change. Only the writer goroutine uses it.
type pending struct {
	events []store.Event
	keys   map[string]store.Event
}

func (p *pending) add(ev store.Event) {
	if p.keys == nil {
		p.keys = make(map[string]store.Event)
	}
	p.events = append(p.events, ev)
	p.keys[ev.KV.Key] = ev
}

// prune forgets the events bbolt holds, those up to revision applied.
func (p *pending) prune(applied int64) {
	n := 0
	for n < len(p.events) && p.events[n].Revision() <= applied {
		ev := p.events[n]
		if p.keys[ev.KV.Key].Revision() == ev.Revision() {
			delete(p.keys, ev.KV.Key) // its newest change: bbolt has it
		}
		n++
	}
	if n > 0 {
		clear(p.events[:n])
		p.events = p.events[n:]
	}
}

// state is what a write is decided against: bbolt as a read transaction
// shows it, with the pending changes over it.
type state struct {
	tx      *bolt.Tx
	pending *pending
}

// current returns key's record, nil when it does not exist.
func (c *state) current(key string) (*store.KeyValue, error) {
	if ev, ok := c.pending.keys[key]; ok {
		if ev.Type == store.EventDelete {
			return nil, nil
		}
		kv := ev.KV
		return &kv, nil
	}
	return currentRecord(c.tx.Bucket(bucketKV), key)
}

// decidePut decides one put at revision rev, or returns its CAS failure in
// the response; no events when nothing is to be written. more marks a
// change of a transaction that more changes follow (store.Event.More).
func decidePut(c *state, p *store.Put, rev int64, now time.Time, more bool) ([]store.Event, response, error) {
	prev, err := c.current(p.Key)
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
	c.pending.add(ev)
	return []store.Event{ev}, response{result: store.Result{Revision: rev, Prev: prev}}, nil
}

// decideDelete is decidePut for a deletion.
func decideDelete(c *state, d *store.Delete, rev int64, now time.Time, more bool) ([]store.Event, response, error) {
	prev, err := c.current(d.Key)
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
	c.pending.add(ev)
	return []store.Event{ev}, response{result: store.Result{Revision: rev, Prev: prev}}, nil
}

// decideTxn checks every compare and unchanged condition against the
// state as of the previous request (st: its revisions), then decides the
// puts and deletes at revisions st.Revision+1, +2, ... A failed condition
// is the response's error and decides nothing.
func decideTxn(c *state, t *store.Txn, st store.Status, now time.Time) ([]store.Event, response, error) {
	rev := st.Revision + 1
	for _, cmp := range t.Compares {
		cur, err := c.current(cmp.Key)
		if err != nil {
			return nil, response{}, err
		}
		expect := cmp.ModRevision
		if mismatch := checkExpected(cmp.Key, &expect, cur); mismatch != nil {
			return nil, response{err: mismatch}, nil
		}
	}
	changed, err := firstChange(c, t.Unchanged, st)
	if err != nil {
		return nil, response{}, err
	}
	if changed != nil {
		return nil, response{err: changed}, nil
	}
	// The deletes of absent keys are skipped, so the changes are known
	// before any is decided: every one but the last says More. (No key
	// appears twice, so the puts do not change which deletes apply.)
	var deletes []string
	for _, key := range t.Deletes {
		cur, err := c.current(key)
		if err != nil {
			return nil, response{}, err
		}
		if cur != nil {
			deletes = append(deletes, key)
		}
	}
	changes := len(t.Puts) + len(deletes)
	events := make([]store.Event, 0, changes)
	for i := range t.Puts {
		p := t.Puts[i]
		p.ExpectModRevision = nil
		evs, _, err := decidePut(c, &p, rev+int64(len(events)), now, len(events)+1 < changes)
		if err != nil {
			return nil, response{}, err
		}
		events = append(events, evs...)
	}
	for _, key := range deletes {
		evs, _, err := decideDelete(c, &store.Delete{Key: key}, rev+int64(len(events)), now, len(events)+1 < changes)
		if err != nil {
			return nil, response{}, err
		}
		events = append(events, evs...)
	}
	return events, response{result: store.Result{Revision: rev + int64(len(events)) - 1}}, nil
}

// firstChange returns the first unchanged condition that fails, reading
// the change log after the earliest revision any of them names: bbolt's,
// then the pending changes (which the group's earlier writes are in).
func firstChange(c *state, conds []store.Unchanged, st store.Status) (*store.ChangedError, error) {
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
	check := newChangeCheck(conds)
	cur := c.tx.Bucket(bucketLog).Cursor()
	for k, v := cur.Seek(revKey(since + 1)); k != nil; k, v = cur.Next() {
		rev := decodeRev(k)
		_, key, err := eventKey(v)
		if err != nil {
			return nil, fmt.Errorf("boltstore: log revision %d: %w", rev, err)
		}
		if changed := check.broken(rev, key); changed != nil {
			return changed, nil
		}
	}
	for _, ev := range c.pending.events {
		if changed := check.broken(ev.Revision(), ev.KV.Key); changed != nil {
			return changed, nil
		}
	}
	return nil, nil
}

// linearConds is how many unchanged conditions a changed key is tested
// against one by one; past it, changeCheck looks its prefixes up.
const linearConds = 8

// changeCheck finds the unchanged condition a change breaks: of those it
// breaks, the first in the transaction's order. A batch of ACKs carries
// a few conditions per ACK, and the log since their revision may hold
// many changes: past linearConds conditions, once a change is to be
// checked, it looks up each of the changed key's prefixes of the
// conditions' lengths in a map, instead of testing the key against
// every condition.
type changeCheck struct {
	conds []store.Unchanged
	// byPrefix is, by prefix, the indexes in conds of its conditions, in
	// order (nil: not built yet, or each condition is tested).
	byPrefix map[string][]int
	// lengths are the prefixes' lengths, each once, shortest first.
	lengths []int
}

func newChangeCheck(conds []store.Unchanged) changeCheck { return changeCheck{conds: conds} }

// index builds byPrefix and lengths.
func (c *changeCheck) index() {
	c.byPrefix = make(map[string][]int, len(c.conds))
	for i, u := range c.conds {
		if _, ok := c.byPrefix[u.Prefix]; !ok {
			c.lengths = append(c.lengths, len(u.Prefix))
		}
		c.byPrefix[u.Prefix] = append(c.byPrefix[u.Prefix], i)
	}
	slices.Sort(c.lengths)
	c.lengths = slices.Compact(c.lengths)
}

// broken returns the first condition that a change of key at rev
// breaks, as a ChangedError, or nil.
func (c *changeCheck) broken(rev int64, key string) *store.ChangedError {
	first := -1
	if len(c.conds) <= linearConds {
		for i, u := range c.conds {
			if rev > u.Since && strings.HasPrefix(key, u.Prefix) {
				first = i
				break
			}
		}
	} else {
		if c.byPrefix == nil {
			c.index()
		}
		for _, n := range c.lengths {
			if n > len(key) {
				break
			}
			for _, i := range c.byPrefix[key[:n]] {
				if first >= 0 && i > first {
					break
				}
				if rev > c.conds[i].Since {
					first = i
					break
				}
			}
		}
	}
	if first < 0 {
		return nil
	}
	u := c.conds[first]
	return &store.ChangedError{Prefix: u.Prefix, Since: u.Since, Key: key, Revision: rev}
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

// logBuckets are a transaction's change log and key index. The log is
// written in revision order, always at its end: its pages are filled
// before they split (bbolt's default splits them half full, for keys
// that land anywhere), so that a page holds twice the events or more
// (7 of some 500 bytes rather than 3) and the log takes, and each
// transaction writes, that many fewer pages. Compaction only deletes
// from the log, with the default fill. Such a *bolt.Bucket is the
// transaction's: get it once per transaction, not per event.
func logBuckets(tx *bolt.Tx) (log, idx *bolt.Bucket) {
	log = tx.Bucket(bucketLog)
	log.FillPercent = 1.0
	return log, tx.Bucket(bucketIdx)
}
