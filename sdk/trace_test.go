package sdk_test

import (
	"context"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/pawlcfg/pawl/sdk"
)

// TestACKTraceIDsMatchTheSpans: every ACK the server stored carries the
// trace context of the span of its step, as the application's tracer
// provider recorded it: the same trace ID (which the server keeps) and
// the span's own ID.
func TestACKTraceIDsMatchTheSpans(t *testing.T) {
	h := newHarness(t)
	recorder := tracedApply(h)

	spans := map[string]sdktrace.ReadOnlySpan{} // by span ID
	for _, s := range recorder.Started() {
		spans[s.SpanContext().SpanID().String()] = s
	}
	stepOf := map[string]string{
		"DISCOVERED": "pawl.rollout", "DOWNLOADED": "pawl.download", "VALIDATED": "pawl.validate",
		"STAGED": "pawl.stage", "APPLIED": "pawl.apply", "HEALTHY_ACKED": "pawl.health_window",
	}
	_, acks := h.acks(1)
	if len(acks) != len(stepOf) {
		t.Fatalf("%d ACKs", len(acks))
	}
	var trace string
	for _, a := range acks {
		state := strings.TrimPrefix(a.GetState().String(), "INSTANCE_STATE_")
		parts := strings.Split(a.GetTraceparent(), "-")
		if len(parts) != 4 {
			t.Fatalf("%s traceparent %q", state, a.GetTraceparent())
		}
		span, ok := spans[parts[2]]
		if !ok {
			t.Fatalf("%s: no recorded span has ID %s", state, parts[2])
		}
		if span.Name() != stepOf[state] || a.GetTraceId() != span.SpanContext().TraceID().String() || a.GetTraceId() != parts[1] {
			t.Fatalf("%s: span %q of trace %s; the server keeps trace ID %q", state, span.Name(), span.SpanContext().TraceID(), a.GetTraceId())
		}
		if trace == "" {
			trace = a.GetTraceId()
		} else if a.GetTraceId() != trace {
			t.Fatalf("the steps of one apply are in two traces: %s and %s", trace, a.GetTraceId())
		}
	}
}

// tracedApply runs instance i0, with a tracer provider that records its
// spans (and opts), through one apply to HEALTHY_ACKED, and returns the
// recorder.
func tracedApply(h *harness, opts ...sdk.Option) *tracetest.SpanRecorder {
	h.t.Helper()
	recorder := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	h.t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	h.client("i0", append(opts, sdk.WithTracerProvider(tp))...)
	h.waitRegistered("i0")
	h.release(50, nil)
	h.awaitAcks(1, func(s map[string][]string) bool { return reported(s, "i0", "HEALTHY_ACKED") })
	return recorder
}
