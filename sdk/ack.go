package sdk

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/durationpb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
)

// reporter sends the ACKs of one apply: one assignment, one apply
// sequence, one boot.
type reporter struct {
	c   *Client
	a   *pawlv1.Assignment
	seq int64
	// digest is the content digest to report: the assignment's until the
	// content is downloaded, then the one computed from it.
	digest string
}

// ackExtra is what some states add to an ACK.
type ackExtra struct {
	healthOK bool
	reason   string
	health   *Measurement
}

// send reports state, with the trace context of the span in ctx, retrying
// until the server takes it or ctx ends. A refusal (a malformed ACK, an
// unknown release) is returned and not retried.
func (r *reporter) send(ctx context.Context, state pawlv1.InstanceState, extra ackExtra) error {
	ack := &pawlv1.Ack{
		ConfigId: r.a.GetConfigId(), Generation: r.a.GetGeneration(), WorkloadIdentity: r.c.cfg.instance.WorkloadIdentity,
		BootId: r.c.bootID, ContentDigest: r.digest, ValidatorDigest: r.a.GetValidatorDigest(), AppArtifact: r.c.cfg.appArtifact,
		ApplySequence: r.seq, State: state, HealthOk: extra.healthOK, Reason: extra.reason, Traceparent: traceparent(ctx),
	}
	if m := extra.health; m != nil && m.Requests > 0 {
		ack.Health = &pawlv1.HealthMeasurement{ErrorRate: m.ErrorRate, P99Latency: durationpb.New(m.P99)}
	}
	err := r.c.retry(ctx, "ack", func(ctx context.Context) error {
		epoch := r.c.epoch.Load()
		if epoch == 0 {
			return connect.NewError(connect.CodeUnavailable, errors.New("the instance is registering again"))
		}
		ack.MembershipEpoch = epoch
		_, err := r.c.rollouts.Ack(ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: ack}))
		return err
	})
	if err != nil && ctx.Err() == nil {
		r.c.cfg.log.Warn("pawl: an ACK was refused", "config", ack.ConfigId, "generation", ack.Generation, "state", state.String(), "error", err)
	}
	if err != nil {
		return fmt.Errorf("sdk: ACK %s of %s@%d: %w", state, ack.ConfigId, ack.Generation, err)
	}
	return nil
}

// traceparent renders the W3C traceparent of the span in ctx, or "" when
// there is none (tracing is off).
func traceparent(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags())
}
