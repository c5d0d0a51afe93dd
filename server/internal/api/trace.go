package api

import (
	"context"
	"fmt"

	"connectrpc.com/connect"
	"connectrpc.com/otelconnect"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/server/internal/rollout"
)

// TraceInterceptors make a server span of every call in tp's traces,
// outermost first. A call's span continues the W3C trace context of its
// traceparent header; an ACK without one continues the trace context the
// ACK itself carries (Ack.traceparent, which the SDKs set to the span of
// the step they report), so that an instance's apply and the server's
// handling of its ACK are one trace. Remote trace context is trusted:
// pawld's callers are its own fleet and operators, and the span only
// names a parent, it grants nothing.
func TraceInterceptors(tp trace.TracerProvider) ([]connect.Interceptor, error) {
	otel, err := otelconnect.NewInterceptor(otelconnect.WithTracerProvider(tp), otelconnect.WithPropagator(propagation.TraceContext{}),
		otelconnect.WithTrustRemote(), otelconnect.WithoutMetrics())
	if err != nil {
		return nil, fmt.Errorf("api: tracing interceptor: %w", err)
	}
	return []connect.Interceptor{ackTraceContext{}, otel}, nil
}

// ackTraceContext gives an ACK that came without a traceparent header the
// one in its message, where the tracing interceptor inside it looks.
type ackTraceContext struct{}

// traceparentHeader is the W3C Trace Context header.
const traceparentHeader = "traceparent"

func (ackTraceContext) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().Procedure != pawlv1connect.RolloutServiceAckProcedure || req.Header().Get(traceparentHeader) != "" {
			return next(ctx, req)
		}
		if in, ok := req.Any().(*pawlv1.AckRequest); ok {
			tp := in.GetAck().GetTraceparent()
			if id, err := rollout.TraceID(tp); err == nil && id != "" {
				req.Header().Set(traceparentHeader, tp)
			}
		}
		return next(ctx, req)
	}
}

func (ackTraceContext) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// WrapStreamingClient leaves client streams alone: the server makes none.
func (ackTraceContext) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}
