package sdk

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/durationpb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/sdk/textsafe"
)

// reporter sends the ACKs of one apply (one assignment, one apply
// sequence, one boot) in order, from its own goroutine, so that the apply
// does not wait for the server between steps: only APPLIED (which starts
// the health window the server measures from its arrival), the last ACK
// and REJECTED are waited for. close ends the goroutine.
type reporter struct {
	c   *Client
	a   *pawlv1.Assignment
	seq int64
	// digest is the content digest to report: the assignment's until the
	// content is downloaded, then the one computed from it. Only the
	// apply's goroutine touches it.
	digest string
	// appliedAt is when the apply's APPLIED was queued, after the swap, by
	// the process's monotonic clock: a HEALTHY_ACKED reports the time
	// since as held, which the server requires to reach the health window
	// (a measure no server's clock can shorten). Only the apply's
	// goroutine touches it.
	appliedAt time.Time

	queue chan queuedAck
	done  chan struct{}
}

type queuedAck struct {
	ctx    context.Context // carries the step's span
	state  pawlv1.InstanceState
	extra  ackExtra
	digest string
	sent   chan error // nil: nobody waits
}

// maxAcksPerApply bounds the ACKs of one apply: every state once, and a
// rejection.
const maxAcksPerApply = 8

func (c *Client) newReporter(a *pawlv1.Assignment) *reporter {
	r := &reporter{c: c, a: a, seq: c.seq.Add(1), digest: a.GetContentDigest(),
		queue: make(chan queuedAck, maxAcksPerApply), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for q := range r.queue {
			err := r.send(q.ctx, q.state, q.digest, q.extra)
			if q.sent != nil {
				q.sent <- err
			}
			if err == nil && q.state == pawlv1.InstanceState_INSTANCE_STATE_APPLIED {
				r.movedPast(q.ctx, q.digest)
			}
		}
	}()
	return r
}

// post queues an ACK of state with the trace context of ctx's span.
func (r *reporter) post(ctx context.Context, state pawlv1.InstanceState, extra ackExtra) {
	r.queue <- queuedAck{ctx: ctx, state: state, extra: r.stamp(state, extra), digest: r.digest}
}

// wait queues an ACK and waits until it and every ACK before it were
// sent. It fails when the server refused it or ctx ended.
func (r *reporter) wait(ctx context.Context, state pawlv1.InstanceState, extra ackExtra) error {
	sent := make(chan error, 1)
	r.queue <- queuedAck{ctx: ctx, state: state, extra: r.stamp(state, extra), digest: r.digest, sent: sent}
	select {
	case err := <-sent:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stamp notes when APPLIED is queued, and gives a HEALTHY_ACKED the time
// held since: measured when queued, it can only fall short of the time
// the report arrives, never exceed it.
func (r *reporter) stamp(state pawlv1.InstanceState, extra ackExtra) ackExtra {
	switch {
	case state == pawlv1.InstanceState_INSTANCE_STATE_APPLIED:
		r.appliedAt = time.Now()
	case state == pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED && !r.appliedAt.IsZero():
		extra.held = time.Since(r.appliedAt)
	}
	return extra
}

// close stops the sender after what is queued (an ended context cuts its
// retries short).
func (r *reporter) close() {
	close(r.queue)
	<-r.done
}

// ackExtra is what some states add to an ACK.
type ackExtra struct {
	healthOK bool
	reason   string
	health   *Measurement
	// held is how long the apply has run, for HEALTHY_ACKED (0: unknown).
	held time.Duration
	// rejectCode and violations are, for REJECTED, the step that refused
	// and the validator's violations (see ackViolations).
	rejectCode pawlv1.RejectCode
	violations []*pawlv1.Violation
}

// send reports state, with the trace context of the span in ctx, retrying
// until the server takes it or ctx ends. A refusal (a malformed ACK, an
// unknown release) is returned and not retried.
func (r *reporter) send(ctx context.Context, state pawlv1.InstanceState, digest string, extra ackExtra) error {
	ack := &pawlv1.Ack{
		ConfigId: r.a.GetConfigId(), Generation: r.a.GetGeneration(), WorkloadIdentity: r.c.cfg.instance.WorkloadIdentity,
		BootId: r.c.bootID, ContentDigest: digest, ValidatorDigest: r.a.GetValidatorDigest(), AppArtifact: r.c.cfg.appArtifact,
		AppVersion: r.c.cfg.instance.AppVersion, ApplySequence: r.seq, State: state, HealthOk: extra.healthOK,
		Reason: textsafe.Clean(extra.reason, maxReasonBytes), Traceparent: traceparent(ctx),
		RejectCode: extra.rejectCode, Violations: extra.violations,
	}
	if extra.held > 0 {
		ack.Held = durationpb.New(extra.held)
	}
	if m := extra.health; m != nil && m.Requests > 0 {
		ack.Health = &pawlv1.HealthMeasurement{ErrorRate: m.ErrorRate, P99Latency: durationpb.New(m.P99)}
	}
	first := time.Now()
	var err error
	for attempt := 0; ; attempt++ {
		// A new report: the retries below send it again with the same
		// number, so that the server answers one it recorded (its answer
		// lost, its session cut) with that record instead of storing it
		// twice. A report sent again because it came too early is a new
		// report, judged again.
		ack.ReportId = r.c.reports.Add(1)
		var judged *pawlv1.Ack
		err = r.c.retry(ctx, "ack", func(ctx context.Context) error {
			epoch := r.c.epoch.Load()
			if epoch == 0 {
				return connect.NewError(connect.CodeUnavailable, errors.New("the instance is registering again"))
			}
			ack.MembershipEpoch = epoch
			var err error
			judged, err = r.c.deliver(ctx, ack)
			return err
		})
		if err != nil || !tooEarly(ack, judged) || attempt == maxEarlyResends {
			break
		}
		// The server's measure of the window fell short (its replicas'
		// clocks disagree, or one stepped): the same report, held longer,
		// counts once its measure reaches the window too.
		if !sleepCtx(ctx, earlyResendPause(ack)) {
			break
		}
		if extra.held > 0 {
			ack.Held = durationpb.New(extra.held + time.Since(first))
		}
	}
	r.c.metrics.acked(ctx, ack.ConfigId, state, err)
	if err != nil && ctx.Err() == nil {
		r.c.cfg.log.Warn("pawl: an ACK was refused", "config", ack.ConfigId, "generation", ack.Generation, "state", state.String(), "error", err)
	}
	if err != nil {
		return fmt.Errorf("sdk: ACK %s of %s@%d: %w", state, ack.ConfigId, ack.Generation, err)
	}
	return nil
}

// deliver sends one ACK and returns the server's record of it: on the
// session, or by RolloutService.Ack when the client has none or the
// server in use holds none.
func (c *Client) deliver(ctx context.Context, ack *pawlv1.Ack) (*pawlv1.Ack, error) {
	if c.sess != nil {
		judged, err := c.sess.ack(ctx, ack)
		if !errors.Is(err, errNoSession) {
			return judged, err
		}
	}
	resp, err := c.rollouts.Ack(ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: ack}))
	if err != nil {
		return nil, err
	}
	return resp.Msg.GetAck(), nil
}

// maxReasonBytes is the longest ACK reason sent: the least bound a server
// puts on request text (pawld --max-text-bytes), so that a long reason (a
// validator's list of violations) is cut rather than the ACK refused.
const maxReasonBytes = 4096

// maxEarlyResends bounds how often a healthy HEALTHY_ACKED that came
// before the server's measure of the window is sent again: enough for a
// skew of several windows between replicas, and no storm when a server's
// clock stands still.
const maxEarlyResends = 20

// tooEarly reports whether the server stored a healthy HEALTHY_ACKED
// without counting it because the health window had not passed by its
// measure (or the instance's).
func tooEarly(sent, judged *pawlv1.Ack) bool {
	return sent.GetState() == pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED && sent.GetHealthOk() &&
		judged != nil && !judged.GetCounted() && strings.HasPrefix(judged.GetNotCountedReason(), "health window:")
}

// earlyResendPause is how long to wait before sending a report that came
// too early again: a quarter of the window, within [100ms, 5s].
func earlyResendPause(a *pawlv1.Ack) time.Duration {
	return min(max(a.GetHeld().AsDuration()/4, 100*time.Millisecond), 5*time.Second)
}

// ranApply is an apply whose APPLIED the server took: what a later STALE
// of its generation reports.
type ranApply struct {
	a      *pawlv1.Assignment
	seq    int64
	digest string
}

// movedPast records that the server took this apply's APPLIED and, when
// the config's previous apply of this boot was of another generation,
// reports STALE for that one: the instance ran it, and its assignment
// moved past it (a newer canary, a promotion's successor, a rollback, a
// stopped rollout). The report is sent after APPLIED was answered, so the
// health window does not wait for it; a failure is logged by send.
func (r *reporter) movedPast(ctx context.Context, digest string) {
	config := r.a.GetConfigId()
	r.c.ranMu.Lock()
	if r.c.ran == nil {
		r.c.ran = map[string]ranApply{}
	}
	prev, ok := r.c.ran[config]
	r.c.ran[config] = ranApply{a: r.a, seq: r.seq, digest: digest}
	r.c.ranMu.Unlock()
	if !ok || prev.a.GetGeneration() == r.a.GetGeneration() {
		return
	}
	stale := &reporter{c: r.c, a: prev.a, seq: prev.seq}
	_ = stale.send(ctx, pawlv1.InstanceState_INSTANCE_STATE_STALE, prev.digest, ackExtra{
		reason: fmt.Sprintf("the assignment moved past generation %d: generation %d is applied", prev.a.GetGeneration(), r.a.GetGeneration())})
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
