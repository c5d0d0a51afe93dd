package api

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"connectrpc.com/connect"
)

// LogInterceptor logs every call, unary or streaming, when it ends: at
// debug level when it succeeded, and with its code when it failed:
// server-side faults (Internal, Unknown, or an error that is not a Connect
// error) at error level, client mistakes and cancellations at info.
func LogInterceptor(log *slog.Logger) connect.Interceptor { return &logInterceptor{log: log} }

type logInterceptor struct{ log *slog.Logger }

func (l *logInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		start := time.Now()
		resp, err := next(ctx, req)
		l.done(req.Spec(), req.Peer(), start, err)
		return resp, err
	}
}

func (l *logInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		start := time.Now()
		err := next(ctx, conn)
		l.done(conn.Spec(), conn.Peer(), start, err)
		return err
	}
}

// WrapStreamingClient leaves client streams alone: the server makes none.
func (l *logInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (l *logInterceptor) done(spec connect.Spec, peer connect.Peer, start time.Time, err error) {
	attrs := []any{"procedure", spec.Procedure, "protocol", peer.Protocol, "duration", time.Since(start)}
	if err == nil {
		l.log.Debug("rpc", attrs...)
		return
	}
	code := connect.CodeOf(err)
	gone := false
	if c, ok := contextCode(err); ok {
		// The caller went away or ran out of time (connect may hand the
		// context's error back before any handler ran): not the server's
		// failure.
		code, gone = c, true
	}
	attrs = append(attrs, "code", code.String(), "error", err)
	var ce *connect.Error
	if !gone && (code == connect.CodeInternal || code == connect.CodeUnknown || !errors.As(err, &ce)) {
		l.log.Error("rpc failed", attrs...)
	} else {
		l.log.Info("rpc failed", attrs...)
	}
}
