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

// WaitingAcks is how many submitted ACKs wait for room in the queue.
func (r *Rollouts) WaitingAcks() int {
	r.acks.mu.Lock()
	defer r.acks.mu.Unlock()
	return len(r.acks.waiting)
}
