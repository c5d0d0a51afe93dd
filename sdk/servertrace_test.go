package sdk_test

import (
	"context"
	"encoding/hex"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracev1 "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/sdk"
	"github.com/pawlcfg/pawl/server"
)

// otlpReceiver is an OTLP/gRPC collector in the test's process: it keeps
// every span exported to it, with its resource's service.name.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	addr string

	mu      sync.Mutex
	spans   []receivedSpan
	arrived chan struct{} // closed, and replaced, when spans arrive
}

type receivedSpan struct {
	service string
	span    *tracev1.Span
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{addr: ln.Addr().String(), arrived: make(chan struct{})}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, r)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return r
}

// Export implements the collector's TraceService.
func (r *otlpReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, receivedSpan{service: service, span: s})
			}
		}
	}
	close(r.arrived)
	r.arrived = make(chan struct{})
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// await waits until ok holds for the spans received, or ctx ends.
func (r *otlpReceiver) await(ctx context.Context, ok func([]receivedSpan) bool) bool {
	for {
		r.mu.Lock()
		held, arrived := ok(r.spans), r.arrived
		r.mu.Unlock()
		if held {
			return true
		}
		select {
		case <-arrived:
		case <-ctx.Done():
			return false
		}
	}
}

// TestTheServerSpanOfAnACKIsInTheSDKTrace: with --otlp-endpoint, pawld
// exports the span of each ACK it handles to the collector, in the trace
// of the instance's step that the ACK reports, as a child of a span the
// SDK's tracer provider recorded: an apply and the server's handling of
// its reports are one trace.
func TestTheServerSpanOfAnACKIsInTheSDKTrace(t *testing.T) {
	// The server exports a batch every 100 ms, not every 5 s, so that the
	// test does not wait for it.
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	recv := startOTLPReceiver(t)
	h := newHarness(t, server.WithOTLPEndpoint("http://"+recv.addr))
	// By RolloutService.Ack: its server span continues the ACK's trace
	// context. (On a session, the server makes no span per ACK yet: the
	// session's ACKs carry their traceparent, and the server keeps its
	// trace ID, which TestAClientFollowsTheServerOnOneSession checks.)
	recorder := tracedApply(h, sdk.WithoutSession())

	sdkSpans := map[string]string{} // span ID -> name
	for _, s := range recorder.Started() {
		sdkSpans[s.SpanContext().SpanID().String()] = s.Name()
	}
	_, acks := h.acks(1)
	want := map[string]string{} // trace ID -> state, of every ACK stored
	for _, a := range acks {
		if a.GetTraceId() == "" {
			t.Fatalf("ACK %s carries no trace context", a.GetState())
		}
		want[a.GetTraceId()] = strings.TrimPrefix(a.GetState().String(), "INSTANCE_STATE_")
	}
	ackSpan := strings.TrimPrefix(pawlv1connect.RolloutServiceAckProcedure, "/")
	ctx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
	defer cancel()
	var missing []string
	found := recv.await(ctx, func(spans []receivedSpan) bool {
		seen := map[string]bool{}
		for _, s := range spans {
			trace, parent := hex.EncodeToString(s.span.GetTraceId()), hex.EncodeToString(s.span.GetParentSpanId())
			if s.service == "pawld" && s.span.GetName() == ackSpan && s.span.GetKind() == tracev1.Span_SPAN_KIND_SERVER && sdkSpans[parent] != "" {
				seen[trace] = true
			}
		}
		missing = missing[:0]
		for trace, state := range want {
			if !seen[trace] {
				missing = append(missing, state+" "+trace)
			}
		}
		return len(missing) == 0
	})
	if !found {
		t.Fatalf("no server span of the ACK, child of an SDK span, in the traces of: %v", missing)
	}
}
