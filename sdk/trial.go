package sdk

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/codes"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
)

// ErrNotOnTrial says that no release of a config is on trial on this
// instance: none is applied, the applied one is not a canary (it is the
// active generation, or was promoted, stopped or replaced since), or a
// failure of its apply was reported already (a failure stands until the
// instance applies again). ReportUnhealthy returns it wrapped.
var ErrNotOnTrial = errors.New("sdk: no release of the config is on trial on this instance")

// trial is an applied canary: a release this instance applied through a
// stage of a rollout that can still stop. While it lasts, the apply's
// goroutine keeps watching the instance's health and takes the
// application's own reports (ReportUnhealthy), so that a failure after
// the health window still reaches the rollout.
type trial struct {
	config     string
	generation int64
	// reports carries ReportUnhealthy's reports to the apply's goroutine,
	// which sends each as an unhealthy HEALTHY_ACKED.
	reports chan unhealthyReport
	// over is closed when the trial ends.
	over chan struct{}
}

// unhealthyReport is one ReportUnhealthy call: sent receives the outcome
// of its ACK.
type unhealthyReport struct {
	reason string
	sent   chan error
}

// ReportUnhealthy reports that the release of config this instance runs
// is unhealthy, for reason (what the application saw: an error-rate
// spike, a dependency down), at once: the instance sends an unhealthy
// HEALTHY_ACKED of that release's apply, which counts as a rejection
// against the stage that assigned it and can stop the rollout. It
// returns once the server took the report, or ctx's error.
//
// Only a canary can be reported: a release applied through a stage of a
// rollout that can still stop, during its health window or after it.
// Otherwise (nothing applied, the release was promoted, stopped or
// replaced, or this apply's failure was reported already) it returns an
// error wrapping ErrNotOnTrial. It is safe for concurrent use.
func (c *Client) ReportUnhealthy(ctx context.Context, config, reason string) error {
	if strings.TrimSpace(reason) == "" {
		return fmt.Errorf("sdk: ReportUnhealthy(%q): a reason is required, it is what the rollout's stop record shows", config)
	}
	c.mu.Lock()
	t := c.trials[config]
	c.mu.Unlock()
	if t == nil {
		return fmt.Errorf("report %s unhealthy: %w", config, ErrNotOnTrial)
	}
	r := unhealthyReport{reason: reason, sent: make(chan error, 1)}
	select {
	case t.reports <- r:
	case <-t.over:
		return fmt.Errorf("report %s generation %d unhealthy: %w", config, t.generation, ErrNotOnTrial)
	case <-ctx.Done():
		return fmt.Errorf("sdk: report %s generation %d unhealthy: %w", config, t.generation, ctx.Err())
	}
	select {
	case err := <-r.sent:
		return err
	case <-ctx.Done():
		return fmt.Errorf("sdk: report %s generation %d unhealthy: %w", config, t.generation, ctx.Err())
	}
}

// startTrial puts a's release on trial, or returns nil when a is no
// canary (the active generation: its rollout is over).
func (c *Client) startTrial(a *pawlv1.Assignment) *trial {
	if a.GetStage() == "" {
		return nil
	}
	t := &trial{config: a.GetConfigId(), generation: a.GetGeneration(), reports: make(chan unhealthyReport), over: make(chan struct{})}
	c.mu.Lock()
	c.trials[t.config] = t
	c.mu.Unlock()
	return t
}

// end ends the trial (idempotent); a nil trial is none.
func (c *Client) endTrial(t *trial) {
	if t == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.trials[t.config] == t {
		delete(c.trials, t.config)
	}
	select {
	case <-t.over:
	default:
		close(t.over)
	}
}

// reportsOf returns the channel of the trial's reports; nil (never
// ready) for no trial.
func (t *trial) reportsOf() <-chan unhealthyReport {
	if t == nil {
		return nil
	}
	return t.reports
}

// budget is a stage's health budget, as the SDK judges its measurements
// after the health window (the server judges the window's report).
type budget struct {
	MaxErrorRate *float64      `json:"max_error_rate,omitempty"`
	MaxP99       time.Duration `json:"max_p99,omitempty"`
}

// budgetOf converts the budget of a stage; nil for none.
func budgetOf(b *pawlv1.HealthBudget) *budget {
	if b == nil || (b.MaxErrorRate == nil && b.GetMaxP99Latency().AsDuration() <= 0) {
		return nil
	}
	out := &budget{MaxP99: b.GetMaxP99Latency().AsDuration()}
	if b.MaxErrorRate != nil {
		rate := b.GetMaxErrorRate()
		out.MaxErrorRate = &rate
	}
	return out
}

// budgetsOf returns the budgets of a plan's stages, by stage name.
func budgetsOf(stages []*pawlv1.Stage) map[string]*budget {
	var out map[string]*budget
	for _, st := range stages {
		if b := budgetOf(st.GetBudget()); b != nil {
			if out == nil {
				out = map[string]*budget{}
			}
			out[st.GetName()] = b
		}
	}
	return out
}

// breach says which limits m breaks ("" for none, and for a nil budget or
// no request measured), in the server's words.
func (b *budget) breach(m Measurement) string {
	if b == nil || m.Requests == 0 {
		return ""
	}
	var over []string
	if b.MaxErrorRate != nil && m.ErrorRate > *b.MaxErrorRate {
		over = append(over, fmt.Sprintf("error rate %.4g is over the budget of %.4g", m.ErrorRate, *b.MaxErrorRate))
	}
	if b.MaxP99 > 0 && m.P99 > b.MaxP99 {
		over = append(over, fmt.Sprintf("p99 latency %s is over the budget of %s", m.P99, b.MaxP99))
	}
	return strings.Join(over, "; ")
}

// watch keeps a healthy canary under watch after its health window,
// until settled is closed (the release was promoted, or is no longer
// assigned), ctx ends (it was replaced, or the client closed), or a
// failure was reported: every health interval it runs the health check
// and, when the stage has a budget, judges the requests of the recent
// past (the health window, or the interval if longer); the first failure,
// or a report of the application's, is sent at once as an unhealthy
// HEALTHY_ACKED of the same apply.
func (c *Client) watch(ctx context.Context, rep *reporter, s *Snapshot, t *trial, settled <-chan struct{}, b *budget, window time.Duration) {
	tick := time.NewTicker(c.cfg.healthInterval)
	defer tick.Stop()
	recent := max(window, c.cfg.healthInterval)
	for {
		var extra ackExtra
		var sent chan error
		select {
		case <-ctx.Done():
			return
		case <-settled:
			return
		case r := <-t.reports:
			m := c.health.since(time.Now().Add(-recent))
			extra, sent = ackExtra{reason: "reported by the application: " + r.reason, health: &m}, r.sent
		case <-tick.C:
			var failed bool
			if extra, failed = c.recheck(ctx, s, b, recent); !failed {
				continue
			}
			select {
			case <-settled:
				return // promoted while the check ran: it decides nothing now
			default:
			}
		}
		c.reportFailure(ctx, rep, extra, sent)
		return
	}
}

// recheck runs the health check and judges the requests of the last
// recent span against the stage's budget; it returns the report of a
// failure, and whether there was one.
func (c *Client) recheck(ctx context.Context, s *Snapshot, b *budget, recent time.Duration) (ackExtra, bool) {
	m := c.health.since(time.Now().Add(-recent))
	if c.cfg.healthCheck != nil {
		if err := c.cfg.healthCheck(ctx, s); err != nil && ctx.Err() == nil {
			return ackExtra{reason: "after the health window: health check failed: " + err.Error(), health: &m}, true
		}
	}
	if over := b.breach(m); over != "" {
		return ackExtra{reason: fmt.Sprintf("after the health window: %s (%d requests in the last %s)", over, m.Requests, recent), health: &m}, true
	}
	return ackExtra{}, false
}

// reportFailure sends an unhealthy HEALTHY_ACKED, in a span of its own,
// and hands its outcome to sent when the application asked for it.
func (c *Client) reportFailure(ctx context.Context, rep *reporter, extra ackExtra, sent chan<- error) {
	ctx, span := c.tracer.Start(ctx, "pawl.health_failure")
	defer span.End()
	span.SetStatus(codes.Error, extra.reason)
	c.cfg.log.Warn("pawl: the release turned unhealthy after its health window", "config", rep.a.GetConfigId(),
		"generation", rep.a.GetGeneration(), "reason", extra.reason)
	err := rep.wait(ctx, pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED, extra)
	if sent != nil {
		sent <- err
	}
}
