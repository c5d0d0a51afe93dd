package rollout

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/pawlcfg/pawl/server/internal/store"
)

// ErrBusy means too many ACKs wait to be recorded: the ACK was not taken,
// and may be sent again shortly. *BusyError says how many.
var ErrBusy = errors.New("rollout: too many ACKs waiting to be recorded")

// BusyError reports an ACK refused because the queue was full. It
// matches ErrBusy.
type BusyError struct {
	// Waiting is the ACKs queued; Limit, the most that may be.
	Waiting, Limit int
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("rollout: %d ACKs wait to be recorded (the limit is %d); send this one again shortly", e.Waiting, e.Limit)
}

// Is reports whether target is ErrBusy.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// The batches' tunables (WithAckBatching changes them).
const (
	// DefaultAckBatch is the most ACKs one store transaction records. A
	// commit costs about the same for 1 or 256 ACKs (one fsync, one Redis
	// script), so larger batches raise throughput until the judgement and
	// encoding of the batch, which the next batch waits for, dominate; 256
	// ACKs are some 1,000 puts, a Redis script of a few milliseconds.
	DefaultAckBatch = 256
	// DefaultAckBatchBytes bounds a batch's ACKs by their estimated size
	// (ackSize), so that REJECTED ACKs with many violations make smaller
	// batches: one Redis script stays well below its argument and time
	// limits. An ACK larger than the bound makes a batch of its own.
	DefaultAckBatchBytes = 1 << 20
	// DefaultAcksWaiting bounds the ACKs queued for the batches: 10,000
	// instances with an ACK each in flight fit, and what waits stays some
	// megabytes. Beyond it SubmitAck answers ErrBusy at once.
	DefaultAcksWaiting = 16384
)

// AckResult is the answer to one submitted ACK.
type AckResult struct {
	// Ack is the ACK as stored, counted or with the reason it does not
	// count: for a report sent again, the ACK stored the first time. It
	// is set, with Err, when the ACK was stored and settling the rollout
	// after it failed.
	Ack Ack
	// Err is why the ACK was not recorded (a malformed ACK, an unknown
	// release, a store failure, ErrBusy, the submitter's context,
	// ErrEarlierNotRecorded), or that settling after it failed.
	Err error
}

// SubmitAck queues ack to be judged and recorded as RecordAck does, in a
// batch with the ACKs queued beside it, and returns at once. The channel
// (buffered, never closed) receives exactly one AckResult: after the
// store committed the transaction that holds the ACK (its record is
// durable) and the rollout was settled, or when it was refused. A
// malformed ACK, a full queue (ErrBusy) and a stopped Rollouts are
// answered before SubmitAck returns.
//
// ACKs of one instance for one config are judged one at a time, in the
// order they were submitted, each against the records the one before it
// left. When ctx ends while the ACK still waits in the queue, it is
// answered with ctx's error and not recorded; once taken into a batch it
// is recorded whatever ctx does, and no submitter's context affects
// another's ACK. SubmitAck may be called concurrently, and before Run
// starts (ACKs wait for it).
func (r *Rollouts) SubmitAck(ctx context.Context, ack Ack) <-chan AckResult {
	res := make(chan AckResult, 1)
	r.SubmitAckFunc(ctx, ack, func(a AckResult) { res <- a })
	return res
}

// SubmitAckFunc is SubmitAck with a callback instead of a channel, for a
// submitter that should not hold a goroutine per ACK to wait: done is
// called exactly once, with what SubmitAck's channel would receive. It
// runs on the goroutine that answers: the batches' (after the commit and
// the settling; for an ACK of an AckChain left unjudged, when it is
// reached), SubmitAckFunc's caller's (a malformed ACK, a full queue,
// a stopped Rollouts, an ended ctx), or the one that ends ctx. done must
// not block: the next batch waits for it (hand slow work, such as a
// durable audit record, to something that calls back in turn).
func (r *Rollouts) SubmitAckFunc(ctx context.Context, ack Ack, done func(AckResult)) {
	r.submit(ctx, ack, nil, false, done)
}

// SubmitAckWaitFunc is SubmitAckFunc for a submitter that can wait, such
// as a session (which then reads no more of its stream): when the queue
// is full it waits, behind the others that wait, until the batches made
// room for the ACK, instead of having it refused with ErrBusy and sent
// again; when ctx ends first, the ACK is answered with ctx's error.
func (r *Rollouts) SubmitAckWaitFunc(ctx context.Context, ack Ack, done func(AckResult)) {
	r.submit(ctx, ack, nil, true, done)
}

// submit queues ack, judged only once after (when set) was recorded;
// wait says whether to wait for room.
func (r *Rollouts) submit(ctx context.Context, ack Ack, after *pendingAck, wait bool, done func(AckResult)) *pendingAck {
	p := &pendingAck{after: after}
	p.done = func(res AckResult) {
		// Not recorded: an error without the ACK (one stored whose
		// settling failed is answered with both, and was recorded).
		if res.Err != nil && res.Ack.ConfigID == "" {
			p.failed.Store(true)
		}
		done(res)
	}
	if err := ack.prepare(); err != nil {
		p.answer(Ack{}, err)
		return p
	}
	p.ack, p.size = ack, ackSize(ack)
	if err := ctx.Err(); err != nil {
		p.answer(Ack{}, err)
		return p
	}
	r.acks.enqueue(ctx, p, wait)
	return p
}

// ErrEarlierNotRecorded answers an ACK of an AckChain that was not judged
// because the ACK of the same config before it in the chain was not
// recorded: the reporter sends both again, in order.
var ErrEarlierNotRecorded = errors.New("rollout: not judged: the report of the same config before it in the message was not recorded; send both again, in order")

// AckChain links the ACKs of one message: each is judged only once the
// ACK of the same config before it in the chain was recorded; when that
// one was not (refused, here or by its submitter (Refused), the store
// unavailable, its context ended), the later ones are not judged either,
// and are answered ErrEarlierNotRecorded. The chain's ACKs wait for room
// in the queue, as SubmitAckWaitFunc's. An
// instance that sends several reports at once, without waiting for each
// answer, then never has a later state judged before an earlier one that
// it must send again, as if it had waited. A chain is used by one
// goroutine.
type AckChain struct {
	r    *Rollouts
	last map[string]*pendingAck // by config
}

// NewAckChain returns an empty chain.
func (r *Rollouts) NewAckChain() *AckChain { return &AckChain{r: r} }

// Refused notes that the chain's next ACK, of config, was refused before
// it could be submitted: the later ones of config are not judged.
func (c *AckChain) Refused(config string) {
	if c.last == nil {
		c.last = map[string]*pendingAck{}
	}
	refused := &pendingAck{}
	refused.failed.Store(true)
	c.last[config] = refused
}

// SubmitFunc is SubmitAckWaitFunc for the chain's next ACK.
func (c *AckChain) SubmitFunc(ctx context.Context, ack Ack, done func(AckResult)) {
	if c.last == nil {
		c.last = map[string]*pendingAck{}
	}
	c.last[ack.ConfigID] = c.r.submit(ctx, ack, c.last[ack.ConfigID], true, done)
}

// ackSize estimates what an ACK adds to a batch's transaction: its
// record, its applied and evidence records, and the keys.
func ackSize(a Ack) int {
	n := 1024 + 2*(len(a.ConfigID)+len(a.WorkloadIdentity)+len(a.BootID)) + len(a.ContentDigest) + len(a.ValidatorDigest) +
		len(a.AppArtifact) + len(a.AppVersion) + len(a.Reason) + len(a.TraceParent) + len(a.RejectCode)
	for _, v := range a.Violations {
		n += 64 + len(v.Path) + len(v.Message) + len(v.Severity)
	}
	return n
}

// The states of a pendingAck.
const (
	ackQueued int32 = iota
	ackTaken
	ackCancelled
)

// pendingAck is one submitted ACK. Whoever moves state from ackQueued
// (the batcher taking it, or its context's end cancelling it) answers it.
type pendingAck struct {
	ack   Ack
	size  int
	done  func(AckResult) // must not block
	state atomic.Int32
	// release stops watching the submitter's context.
	release func() bool
	// after, when set, is the ACK of the same instance and config before
	// it in its AckChain: answered before this one is taken (a batch
	// holds one ACK per groupKey, in the queue's order). failed says this
	// one was answered with an error.
	after  *pendingAck
	failed atomic.Bool
}

// answer delivers the result; each pendingAck is answered once.
func (p *pendingAck) answer(a Ack, err error) { p.done(AckResult{Ack: a, Err: err}) }

// groupKey is what at most one ACK of a batch may share: every ACK of an
// instance for a config reads and writes the instance's applied record of
// the config, and its judgement rests on those before it.
type groupKey struct{ config, identity string }

// ackBatcher records ACKs in batches: the group commit of etcd's and
// bbolt's writers. One goroutine (run) takes whatever queued while the
// batch before committed (no waiting to fill a batch), at most one ACK per
// instance and config and at most maxAcks or maxBytes, judges them all
// against the views at one revision, and commits them with one store
// transaction: its conditions are the union of each judgement's, its
// writes all of theirs. A transaction that fails on a condition (a record
// a judgement read changed: a registration, a pointer) is not retried as
// a whole: each of its ACKs is recorded by itself, concurrently, so that
// one conflicting ACK delays the others by one commit and cannot starve
// them; each keeps RecordAck's bound on judgements (ErrContended). Then
// each release the batch touched is settled once, and the ACKs answered.
//
// The queue is a slice under mu, not a channel, so that an ACK of an
// instance already in the batch stays queued, in order, for the next.
type ackBatcher struct {
	r                           *Rollouts
	maxAcks, maxBytes, maxQueue int
	// observe, if set, hears how many ACKs each transaction recorded.
	observe func(acks int)
	// waitingMoved, if set (tests), is called, holding mu, whenever the
	// list of ACKs waiting for room changes.
	waitingMoved func()

	mu      sync.Mutex
	queue   []*pendingAck
	stopped error // set when run returned: SubmitAck answers it
	wake    chan struct{}
	// waiting are the ACKs of submitters that wait for room (sessions),
	// in the order they came: take moves them into the queue as it
	// empties, and wakes their submitters.
	waiting []ackWaiter

	// lastRev is the revision of the last batch's commit (run only): the
	// next batch is judged on views at least there, so that it sees its
	// own instances' ACKs and its conditions scan little of the log.
	lastRev int64
	// late keeps the releases the views do not keep that batches judged
	// ACKs of (run only).
	late lateReleases
	// views is the room judge reads each ACK's view into, kept for the
	// next batch (run only): a view is over a kilobyte, and a batch of
	// hundreds of ACKs made its own.
	views []ackView
}

func newAckBatcher(r *Rollouts) *ackBatcher {
	return &ackBatcher{r: r, maxAcks: DefaultAckBatch, maxBytes: DefaultAckBatchBytes, maxQueue: DefaultAcksWaiting, wake: make(chan struct{}, 1)}
}

// enqueue queues p, or answers it at once when the batcher stopped, or
// when the queue is full and the submitter does not wait. One that waits
// (wait) is queued behind the others that wait, and enqueue returns once
// take moved it into the queue, ctx ended (which answers it), or the
// batcher stopped (which answers it).
func (b *ackBatcher) enqueue(ctx context.Context, p *pendingAck, wait bool) {
	b.mu.Lock()
	full := len(b.queue) >= b.maxQueue
	switch {
	case b.stopped != nil:
		b.mu.Unlock()
		p.answer(Ack{}, b.stopped)
		return
	case full && !wait:
		b.mu.Unlock()
		p.answer(Ack{}, &BusyError{Waiting: len(b.queue), Limit: b.maxQueue})
		return
	}
	p.release = context.AfterFunc(ctx, func() {
		if p.state.CompareAndSwap(ackQueued, ackCancelled) {
			p.answer(Ack{}, ctx.Err())
		}
	})
	if wait && (full || len(b.waiting) > 0) {
		w := ackWaiter{p: p, admitted: make(chan struct{})}
		b.waiting = append(b.waiting, w)
		b.movedWaitingLocked()
		b.mu.Unlock()
		select {
		case <-w.admitted:
		case <-ctx.Done():
			// Answered by the AfterFunc; not left waiting (its answer
			// holds its submitter's state) until the queue has room.
			b.mu.Lock()
			b.waiting = slices.DeleteFunc(b.waiting, func(o ackWaiter) bool { return o.p == p })
			b.movedWaitingLocked()
			b.mu.Unlock()
		}
		return
	}
	b.queue = append(b.queue, p)
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// movedWaitingLocked tells the test hook that the waiting list changed.
// The caller holds mu.
func (b *ackBatcher) movedWaitingLocked() {
	if b.waitingMoved != nil {
		b.waitingMoved()
	}
}

// ackWaiter is an ACK waiting for room in the queue; admitted is closed
// once it is in (or the batcher stopped).
type ackWaiter struct {
	p        *pendingAck
	admitted chan struct{}
}

// run records batches until ctx ends, its only exit; it then answers
// every ACK still queued, and those submitted later, with an error that
// matches store.ErrClosed.
func (b *ackBatcher) run(ctx context.Context) {
	defer b.stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.wake:
		}
		for ctx.Err() == nil {
			batch := b.take()
			if len(batch) == 0 {
				break
			}
			b.record(ctx, batch)
		}
	}
}

func (b *ackBatcher) stop() {
	b.mu.Lock()
	b.stopped = fmt.Errorf("rollout: ACKs are no longer recorded: %w", store.ErrClosed)
	queue := b.queue
	b.queue = nil
	waiting := b.waiting
	b.waiting = nil
	b.mu.Unlock()
	for _, w := range waiting {
		queue = append(queue, w.p)
		close(w.admitted)
	}
	for _, p := range queue {
		if p.state.CompareAndSwap(ackQueued, ackTaken) {
			p.release()
			p.answer(Ack{}, b.stopped)
		}
	}
}

// take takes the next batch from the queue: in order, at most one ACK
// per groupKey, up to maxAcks and maxBytes (one ACK at least). What it
// leaves stays queued in order; cancelled ACKs are dropped.
func (b *ackBatcher) take() []*pendingAck {
	var unjudged []*pendingAck
	defer func() {
		// Answered outside the lock, in order: each one's failure is
		// seen by the next of its chain.
		for _, p := range unjudged {
			p.answer(Ack{}, fmt.Errorf("%w (%s %s)", ErrEarlierNotRecorded, p.ack.ConfigID, p.ack.State))
		}
	}()
	b.mu.Lock()
	defer b.mu.Unlock()
	var (
		batch []*pendingAck
		bytes int
		in    = map[groupKey]bool{}
		rest  = b.queue[:0]
		full  bool
	)
	for _, p := range b.queue {
		k := groupKey{p.ack.ConfigID, p.ack.WorkloadIdentity}
		switch {
		case p.state.Load() == ackCancelled:
			continue
		case full || in[k]:
			rest = append(rest, p)
			continue
		case p.after != nil && (p.after.failed.Load() || p.after.state.Load() == ackCancelled):
			// The one before it in its chain, answered before this one
			// was reached (a batch holds one of its groupKey), was not
			// recorded. Marked failed here, so that its own follower,
			// later in this pass, is not judged either.
			if p.state.CompareAndSwap(ackQueued, ackTaken) {
				p.release()
				p.failed.Store(true)
				p.after = nil
				unjudged = append(unjudged, p)
			}
			continue
		case len(batch) > 0 && (len(batch) == b.maxAcks || bytes+p.size > b.maxBytes):
			full = true
			rest = append(rest, p)
			continue
		case !p.state.CompareAndSwap(ackQueued, ackTaken):
			continue // cancelled just now: answered
		}
		p.release()
		p.after = nil // answered: it need not be held
		in[k] = true
		bytes += p.size
		batch = append(batch, p)
	}
	clear(b.queue[len(rest):])
	b.queue = rest
	// Room made: the waiting ACKs come in, in their order.
	n := 0
	for n < len(b.waiting) && len(b.queue) < b.maxQueue {
		w := b.waiting[n]
		if w.p.state.Load() != ackCancelled {
			b.queue = append(b.queue, w.p)
		}
		close(w.admitted)
		n++
	}
	b.waiting = slices.Delete(b.waiting, 0, n)
	if n > 0 {
		b.movedWaitingLocked()
		select {
		case b.wake <- struct{}{}: // what came in is taken even if this batch is empty
		default:
		}
	}
	return batch
}

// judged is one ACK of a batch, judged.
type judged struct {
	p *pendingAck
	w ackWrite
	// rev is the revision its rollout is settled at.
	rev int64
	err error
}

// record judges a batch, commits it, settles what it touched and answers
// each ACK.
func (b *ackBatcher) record(ctx context.Context, batch []*pendingAck) {
	js := b.judge(ctx, batch)
	var writes []*judged
	for _, j := range js {
		if j.err == nil && !j.w.resent {
			writes = append(writes, j)
		}
	}
	if len(writes) > 0 {
		b.commit(ctx, writes)
	}
	b.settle(ctx, js)
	for _, j := range js {
		j.p.answer(j.w.ack, j.err)
	}
}

// judge judges every ACK of the batch on the views at one revision (at
// least the last batch's), read under one lock; an ACK of a release the
// views do not keep is judged from the store.
func (b *ackBatcher) judge(ctx context.Context, batch []*pendingAck) []*judged {
	js := make([]*judged, len(batch))
	slab := make([]judged, len(batch))
	for i, p := range batch {
		slab[i].p = p
		js[i] = &slab[i]
	}
	// The last batch's commit is an event under /_pawl/: the feed brings it.
	err := b.r.views.waitUntil(ctx, b.lastRev, false)
	// The views passed the last batch's commit (or it failed): what they
	// did not take of its records, they never will.
	b.r.written.clear()
	if err != nil {
		for _, j := range js {
			j.err = err
		}
		return js
	}
	avs := slices.Grow(b.views[:0], len(batch))[:len(batch)]
	defer func() {
		clear(avs) // what they point to is the views' and the store's
		b.views = avs[:0]
	}()
	kept := make([]bool, len(batch))
	// unknown: a release the views have not seen yet (they lag its
	// creation), judged from the store at its head, not at the views'
	// revision, where it did not exist and its write would fail.
	unknown := make([]bool, len(batch))
	v := b.r.views
	v.mu.RLock()
	rev := v.rev
	for i, p := range batch {
		a := p.ack
		if avs[i], kept[i] = b.r.ackViewLocked(a.ConfigID, a.Generation, a.WorkloadIdentity); kept[i] {
			continue
		}
		if cv := v.configs[a.ConfigID]; cv == nil || a.Generation > cv.head {
			unknown[i] = true
			continue
		}
		avs[i] = b.r.instanceViewLocked(a.ConfigID, a.WorkloadIdentity)
		b.late.dropChangedLocked(v, a.ConfigID, a.Generation)
	}
	v.mu.RUnlock()
	plans := storedPlans{}
	for i, j := range js {
		a := j.p.ack
		switch {
		case unknown[i]:
			avs[i], j.err = b.r.ackViewFromStore(ctx, a.ConfigID, a.Generation, a.WorkloadIdentity, plans)
		case !kept[i]:
			avs[i], j.err = b.lateAckView(ctx, a, avs[i], rev, plans)
		}
		if j.err != nil {
			continue
		}
		j.w, j.err = b.r.decideAck(ctx, a, avs[i])
		j.rev = j.w.rev
	}
	return js
}

// commit stores the judged writes with one transaction, or, when that
// fails on a condition or the store's quota, each by itself.
func (b *ackBatcher) commit(ctx context.Context, writes []*judged) {
	var t store.Txn
	seen := map[string]int{} // prefix -> index in t.Unchanged
	for _, j := range writes {
		// Noted before the transaction: the store may hand its events to
		// the views before it returns.
		for _, rec := range j.w.readBack {
			b.r.written.add(rec)
		}
		t.Puts = append(t.Puts, j.w.puts...)
		t.Deletes = append(t.Deletes, j.w.deletes...)
		t.Compares = append(t.Compares, j.w.compares...) // one instance's of one config each
		for _, u := range j.w.unchanged {
			if i, ok := seen[u.Prefix]; ok {
				t.Unchanged[i].Since = min(t.Unchanged[i].Since, u.Since)
				continue
			}
			seen[u.Prefix] = len(t.Unchanged)
			t.Unchanged = append(t.Unchanged, u)
		}
	}
	res, err := b.r.store.Txn(ctx, t)
	var quota *store.QuotaError
	switch {
	case err == nil:
		b.lastRev = res.Revision
		b.observed(len(writes))
		for _, j := range writes {
			j.rev = res.Revision
		}
	case errors.Is(err, store.ErrRevisionMismatch) || (errors.As(err, &quota) && len(writes) > 1):
		b.alone(ctx, writes)
	default:
		for _, j := range writes {
			j.w, j.err = ackWrite{}, fmt.Errorf("rollout: store ACK: %w", err)
		}
	}
}

// alone records each of writes by itself, concurrently, after the views
// caught up with what made the batch's transaction fail; each was judged
// once already.
func (b *ackBatcher) alone(ctx context.Context, writes []*judged) {
	if err := b.r.wait(ctx, true); err != nil {
		for _, j := range writes {
			j.w, j.err = ackWrite{}, err
		}
		return
	}
	var wg sync.WaitGroup
	for _, j := range writes {
		wg.Go(func() {
			var stored Ack
			stored, j.rev, j.err = b.r.recordOne(ctx, j.p.ack, maxAttempts-1)
			j.w = ackWrite{ack: stored} // Ack{} when not recorded
			if errors.Is(j.err, ErrContended) {
				j.err = contended(j.p.ack, maxAttempts)
			}
		})
	}
	wg.Wait()
	for _, j := range writes {
		if j.err == nil {
			b.lastRev = max(b.lastRev, j.rev)
			b.observed(1)
		}
	}
}

func (b *ackBatcher) observed(acks int) {
	if b.observe != nil {
		b.observe(acks)
	}
}

// settle settles, once each, the releases whose stored ACKs settle them
// (settles), at the latest revision among them; when that fails, each such
// ACK's answer says it was stored and settling failed.
func (b *ackBatcher) settle(ctx context.Context, js []*judged) {
	type release struct {
		config string
		gen    int64
	}
	at := map[release]int64{}
	var order []release
	for _, j := range js {
		if j.err != nil || !settles(j.w.ack) {
			continue
		}
		k := release{j.w.ack.ConfigID, j.w.ack.Generation}
		if _, ok := at[k]; !ok {
			order = append(order, k)
		}
		at[k] = max(at[k], j.rev)
	}
	failed := map[release]error{}
	for _, k := range order {
		if err := b.r.settleAt(ctx, k.config, k.gen, at[k]); err != nil {
			failed[k] = settleFailed(err)
		}
	}
	for _, j := range js {
		if err, ok := failed[release{j.w.ack.ConfigID, j.w.ack.Generation}]; ok && j.err == nil && settles(j.w.ack) {
			j.err = err
		}
	}
}
