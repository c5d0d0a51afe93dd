package api

import (
	"context"
	"errors"
	"strings"
	"time"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/server/internal/metrics"
)

// MetricsInterceptor counts every call, unary or streaming, in m: started
// and finished by procedure and code, unary calls timed, streams open;
// a ResourceExhausted refusal by the limit it names; and an ACK by its
// state and whether it counted. Put it outermost, so that it sees the
// code of every refusal the other interceptors make.
func MetricsInterceptor(m *metrics.Metrics) connect.Interceptor { return &metricsInterceptor{m: m} }

type metricsInterceptor struct{ m *metrics.Metrics }

func (i *metricsInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		procedure := req.Spec().Procedure
		i.m.RPCStarted(procedure)
		start := time.Now()
		resp, err := next(ctx, req)
		i.done(ctx, procedure, start, err, false)
		if procedure == pawlv1connect.RolloutServiceAckProcedure {
			i.ack(req, resp, err)
		}
		return resp, err
	}
}

func (i *metricsInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		procedure := conn.Spec().Procedure
		i.m.RPCStarted(procedure)
		closed := i.m.StreamOpened(procedure)
		start := time.Now()
		err := next(ctx, conn)
		closed()
		i.done(ctx, procedure, start, err, true)
		return err
	}
}

// WrapStreamingClient leaves client streams alone: the server makes none.
func (i *metricsInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i *metricsInterceptor) done(ctx context.Context, procedure string, start time.Time, err error, stream bool) {
	i.m.RPCHandled(procedure, codeLabel(err), time.Since(start), stream)
	if connect.CodeOf(err) == connect.CodeResourceExhausted && !metrics.BodyRefused(ctx) {
		i.m.Refused(limitOf(err))
	}
}

// limitOf names the limit of a ResourceExhausted refusal: the flag of its
// LimitExceeded detail, else the flag its message names.
func limitOf(err error) string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return metrics.LimitOf(err.Error())
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if le, ok := v.(*pawlv1.LimitExceeded); ok && strings.HasPrefix(le.GetLimit(), "--") {
				return strings.TrimPrefix(le.GetLimit(), "--")
			}
		}
	}
	return metrics.LimitOf(ce.Message())
}

// ack counts an ACK by its state and outcome.
func (i *metricsInterceptor) ack(req connect.AnyRequest, resp connect.AnyResponse, err error) {
	in, ok := req.Any().(*pawlv1.AckRequest)
	if !ok {
		return
	}
	var stored *pawlv1.Ack
	if err == nil {
		if out, ok := resp.Any().(*pawlv1.AckResponse); ok {
			stored = out.GetAck()
		}
	}
	countAck(i.m, in.GetAck(), stored, err)
}

// countAck counts an ACK, in, by its state and outcome: refused (err),
// or stored and counted or not.
func countAck(m *metrics.Metrics, in, stored *pawlv1.Ack, err error) {
	state := "UNKNOWN" // a number outside the enum: no label of its own
	if s := in.GetState(); pawlv1.InstanceState_name[int32(s)] != "" {
		state = strings.TrimPrefix(s.String(), "INSTANCE_STATE_")
	}
	result := metrics.AckRefused
	if err == nil {
		result = metrics.AckNotCounted
		if stored.GetCounted() {
			result = metrics.AckCounted
		}
	}
	m.AckReceived(state, result)
}

// codeLabel is the code a call ended with, as a label: "ok", or the
// Connect code's name, a context's error mapped as the log does.
func codeLabel(err error) string {
	if err == nil {
		return "ok"
	}
	if code, ok := contextCode(err); ok {
		return code.String()
	}
	return connect.CodeOf(err).String()
}
