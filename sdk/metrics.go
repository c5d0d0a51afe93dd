package sdk

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
)

// The client's OpenTelemetry instruments (WithMeterProvider), under the
// meter "github.com/pawlcfg/pawl/sdk":
//
//	pawl.sdk.applies        counter  releases swapped in {pawl.config, pawl.generation}
//	pawl.sdk.rejects        counter  releases rejected {pawl.config, pawl.generation, pawl.step}
//	pawl.sdk.acks.sent      counter  ACKs the server took {pawl.config, pawl.state}
//	pawl.sdk.acks.failed    counter  ACKs given up on (refused, or retried until the apply ended) {pawl.config, pawl.state}
//	pawl.sdk.stale          gauge    seconds since the link to the server went down (0 while up)
//	pawl.sdk.generation     gauge    the applied generation {pawl.config, pawl.from_cache}
const (
	// MetricApplies counts the releases swapped in.
	MetricApplies = "pawl.sdk.applies"
	// MetricRejects counts the releases rejected.
	MetricRejects = "pawl.sdk.rejects"
	// MetricAcksSent counts the ACKs the server took.
	MetricAcksSent = "pawl.sdk.acks.sent"
	// MetricAcksFailed counts the ACKs given up on.
	MetricAcksFailed = "pawl.sdk.acks.failed"
	// MetricStale is the seconds since the link to the server went down.
	MetricStale = "pawl.sdk.stale"
	// MetricGeneration is each config's applied generation.
	MetricGeneration = "pawl.sdk.generation"
)

// metrics holds the client's instruments; the zero value (no meter
// provider) records nothing.
type metrics struct {
	applies, rejects, acksSent, acksFailed metric.Int64Counter
	reg                                    metric.Registration
}

func newMetrics(c *Client, mp metric.MeterProvider) (*metrics, error) {
	m := &metrics{}
	if mp == nil {
		return m, nil
	}
	meter := mp.Meter("github.com/pawlcfg/pawl/sdk")
	var err error
	counter := func(name, desc string) metric.Int64Counter {
		if err != nil {
			return nil
		}
		var ctr metric.Int64Counter
		ctr, err = meter.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit("{"+strings.TrimPrefix(name, "pawl.sdk.")+"}"))
		return ctr
	}
	m.applies = counter(MetricApplies, "Releases the client swapped in.")
	m.rejects = counter(MetricRejects, "Releases the client rejected (download, verify, validate or apply failed).")
	m.acksSent = counter(MetricAcksSent, "ACKs the server took.")
	m.acksFailed = counter(MetricAcksFailed, "ACKs the client gave up on.")
	if err != nil {
		return nil, fmt.Errorf("sdk: metrics: %w", err)
	}
	stale, err := meter.Float64ObservableGauge(MetricStale, metric.WithUnit("s"),
		metric.WithDescription("Seconds since the link to the server went down (since the start while it never came up); 0 while up."))
	if err != nil {
		return nil, fmt.Errorf("sdk: metrics: %w", err)
	}
	gen, err := meter.Int64ObservableGauge(MetricGeneration, metric.WithDescription("The generation of each config the client serves."))
	if err != nil {
		return nil, fmt.Errorf("sdk: metrics: %w", err)
	}
	m.reg, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		conn := c.Connection()
		secs := 0.0
		if !conn.Up {
			secs = time.Since(conn.Since).Seconds()
		}
		o.ObserveFloat64(stale, secs)
		for id, s := range c.Configs() {
			o.ObserveInt64(gen, s.Generation, metric.WithAttributes(attribute.String("pawl.config", id), attribute.Bool("pawl.from_cache", s.FromCache)))
		}
		return nil
	}, stale, gen)
	if err != nil {
		return nil, fmt.Errorf("sdk: metrics: %w", err)
	}
	return m, nil
}

func (m *metrics) applied(ctx context.Context, s *Snapshot) {
	if m.applies != nil {
		m.applies.Add(ctx, 1, metric.WithAttributes(attribute.String("pawl.config", s.Config), attribute.Int64("pawl.generation", s.Generation)))
	}
}

func (m *metrics) rejected(ctx context.Context, a *pawlv1.Assignment, step string) {
	if m.rejects != nil {
		m.rejects.Add(ctx, 1, metric.WithAttributes(attribute.String("pawl.config", a.GetConfigId()),
			attribute.Int64("pawl.generation", a.GetGeneration()), attribute.String("pawl.step", strings.TrimPrefix(step, "pawl."))))
	}
}

func (m *metrics) acked(ctx context.Context, config string, state pawlv1.InstanceState, err error) {
	ctr := m.acksSent
	if err != nil {
		ctr = m.acksFailed
	}
	if ctr != nil {
		// The ACK's context may have ended (a failure at the apply's
		// end): the measurement is recorded all the same.
		ctr.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(attribute.String("pawl.config", config),
			attribute.String("pawl.state", strings.TrimPrefix(state.String(), "INSTANCE_STATE_"))))
	}
}

func (m *metrics) close() {
	if m != nil && m.reg != nil {
		_ = m.reg.Unregister()
	}
}
