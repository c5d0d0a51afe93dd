package rollout

import "context"

// RecordAckAlone is RecordAck without batches (one transaction per ACK),
// for the benchmarks to compare with.
func (r *Rollouts) RecordAckAlone(ctx context.Context, ack Ack) (Ack, error) {
	return r.recordAlone(ctx, ack)
}

// KeptCountedAcks says whether the views keep generation gen of config,
// and how many counted ACKs of its members they hold.
func (r *Rollouts) KeptCountedAcks(config string, gen int64) (kept bool, counted int) {
	r.views.mu.RLock()
	defer r.views.mu.RUnlock()
	t := r.views.findLocked(config, gen)
	if t == nil {
		return false, 0
	}
	for _, mv := range t.members {
		counted += len(mv.acks)
	}
	return true, counted
}

// AwaitWaitingAcks waits until n submitted ACKs wait for room in the
// queue, or ctx ends (false).
func (r *Rollouts) AwaitWaitingAcks(ctx context.Context, n int) bool {
	moved := make(chan struct{}, 1)
	r.acks.mu.Lock()
	r.acks.waitingMoved = func() {
		select {
		case moved <- struct{}{}:
		default:
		}
	}
	r.acks.mu.Unlock()
	defer func() {
		r.acks.mu.Lock()
		r.acks.waitingMoved = nil
		r.acks.mu.Unlock()
	}()
	for {
		r.acks.mu.Lock()
		waiting := len(r.acks.waiting)
		r.acks.mu.Unlock()
		if waiting == n {
			return true
		}
		select {
		case <-moved:
		case <-ctx.Done():
			return false
		}
	}
}

// ViewedAcks are the counted ACKs the views hold of generation gen of
// config, by member, in arrival order (nil: the views do not keep it),
// and the applied records they hold of config, by member.
func (r *Rollouts) ViewedAcks(config string, gen int64) (map[string][]Ack, map[string]AppliedRecord) {
	r.views.mu.RLock()
	defer r.views.mu.RUnlock()
	t := r.views.findLocked(config, gen)
	if t == nil {
		return nil, nil
	}
	acks := map[string][]Ack{}
	for id, mv := range t.members {
		acks[id] = append([]Ack(nil), mv.acks...)
	}
	applied := map[string]AppliedRecord{}
	for id, info := range r.views.applied[config] {
		applied[id] = AppliedRecord{Generation: info.gen, ContentDigest: info.contentDigest, BootID: info.boot,
			MembershipEpoch: info.epoch, ApplySequence: info.seq}
	}
	return acks, applied
}

// NotedRecords is how many records of batches the views have not taken.
func (r *Rollouts) NotedRecords() int {
	r.written.mu.Lock()
	defer r.written.mu.Unlock()
	return len(r.written.byKey)
}

// ViewsRevision is the revision the views hold every change up to.
func (r *Rollouts) ViewsRevision() int64 {
	r.views.mu.RLock()
	defer r.views.mu.RUnlock()
	return r.views.rev
}
