package rollout

import "context"

// RecordAckAlone is RecordAck without batches (one transaction per ACK),
// for the benchmarks to compare with.
func (r *Rollouts) RecordAckAlone(ctx context.Context, ack Ack) (Ack, error) {
	return r.recordAlone(ctx, ack)
}
