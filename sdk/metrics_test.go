package sdk_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/internal/testkit/faultproxy"
	"github.com/pawlcfg/pawl/sdk"
)

// collect reads every metric of reader into name -> points, each point
// keyed by its attributes ("pawl.config=routing,pawl.state=APPLIED").
func collect(t *testing.T, reader *sdkmetric.ManualReader) map[string]map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]float64{}
	key := func(set attribute.Set) string {
		var s string
		for _, kv := range set.ToSlice() {
			if s != "" {
				s += ","
			}
			s += string(kv.Key) + "=" + kv.Value.Emit()
		}
		return s
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			points := map[string]float64{}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					points[key(p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					points[key(p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					points[key(p.Attributes)] = p.Value
				}
			}
			out[m.Name] = points
		}
	}
	return out
}

// awaitPoint waits until reader has the point key of metric name at
// want: an ACK's count is recorded once the server answered it, just
// after the test can see the ACK stored, so the last of a sequence is
// awaited (polled: nothing signals a recording).
func awaitPoint(t *testing.T, reader *sdkmetric.ManualReader, name, key string, want float64) map[string]map[string]float64 {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		m := collect(t, reader)
		if m[name][key] == want {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s{%s} = %v, want %v (%v)", name, key, m[name][key], want, m[name])
		}
	}
}

// TestMetricsCountAppliesAcksRejectsAndStaleness: with a meter provider,
// the client counts the release it applied and the ACKs the server took,
// by state; reports the generation it serves; counts a release rejected
// by its step; and reports how long it has been cut off from the server.
func TestMetricsCountAppliesAcksRejectsAndStaleness(t *testing.T) {
	h := newHarness(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	proxy := faultproxy.NewHolder(t, h.srv.Addr)
	c := h.clientAt("http://"+proxy.Addr, "svc", sdk.WithMeterProvider(mp), sdk.WithLabels(map[string]string{"instance": "svc"}))
	h.waitRegistered("svc")
	h.release(30, nil)
	h.awaitAcks(1, func(s map[string][]string) bool { return reported(s, "svc", "HEALTHY_ACKED") })

	m := awaitPoint(t, reader, sdk.MetricAcksSent, "pawl.config=routing,pawl.state=HEALTHY_ACKED", 1)
	if got := m[sdk.MetricApplies]["pawl.config=routing,pawl.generation=1"]; got != 1 {
		t.Errorf("applies of routing@1: %v (%v)", got, m[sdk.MetricApplies])
	}
	for _, state := range []string{"DISCOVERED", "DOWNLOADED", "VALIDATED", "STAGED", "APPLIED", "HEALTHY_ACKED"} {
		if got := m[sdk.MetricAcksSent]["pawl.config=routing,pawl.state="+state]; got != 1 {
			t.Errorf("%s ACKs sent: %v (%v)", state, got, m[sdk.MetricAcksSent])
		}
	}
	if len(m[sdk.MetricAcksFailed]) != 0 {
		t.Errorf("ACKs failed: %v", m[sdk.MetricAcksFailed])
	}
	if got := m[sdk.MetricGeneration]["pawl.config=routing,pawl.from_cache=false"]; got != 1 {
		t.Errorf("generation gauge: %v", m[sdk.MetricGeneration])
	}
	if got, ok := m[sdk.MetricStale][""]; !ok || got != 0 {
		t.Errorf("stale while connected: %v", m[sdk.MetricStale])
	}

	// An instance whose validation limit no validation meets rejects
	// the next release, at its validate step.
	slowReader := sdkmetric.NewManualReader()
	slowMP := sdkmetric.NewMeterProvider(sdkmetric.WithReader(slowReader))
	t.Cleanup(func() { _ = slowMP.Shutdown(context.Background()) })
	h.client("slow", sdk.WithMeterProvider(slowMP), sdk.WithValidatorTimeout(time.Microsecond), // a runtime of its own, with that limit
		sdk.WithLabels(map[string]string{"instance": "slow"}))
	h.waitRegistered("slow")
	rel := h.release(60, func(spec *pawlv1.ReleaseSpec) { spec.Selector = map[string]string{"instance": "slow"} })
	h.awaitRejected(rel.GetGeneration(), "slow")
	slow := awaitPoint(t, slowReader, sdk.MetricAcksSent, "pawl.config=routing,pawl.state=REJECTED", 1)
	if got := slow[sdk.MetricRejects]["pawl.config=routing,pawl.generation=2,pawl.step=validate"]; got != 1 {
		t.Errorf("rejects: %v", slow[sdk.MetricRejects])
	}
	if got := slow[sdk.MetricAcksSent]["pawl.config=routing,pawl.state=REJECTED"]; got != 1 {
		t.Errorf("REJECTED ACKs sent: %v", slow[sdk.MetricAcksSent])
	}
	if len(slow[sdk.MetricApplies]) != 0 {
		t.Errorf("applies of the instance that rejected: %v", slow[sdk.MetricApplies])
	}

	down := make(chan struct{})
	stop := c.OnConnection(func(conn sdk.Connection) {
		if !conn.Up {
			select {
			case <-down:
			default:
				close(down)
			}
		}
	})
	defer stop()
	proxy.Partition()
	select {
	case <-down:
	case <-h.ctx.Done():
		t.Fatal("the client never saw the partition")
	}
	m = collect(t, reader)
	if got := m[sdk.MetricStale][""]; got <= 0 {
		t.Errorf("stale while cut off: %v", m[sdk.MetricStale])
	}
	if conn := c.Connection(); conn.Up || conn.Err == nil {
		t.Errorf("Connection while cut off: %+v", conn)
	}
}
