package server

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"connectrpc.com/connect"
)

// logInterceptor logs every unary call at debug level, and failed ones with
// their code: server-side faults at error level, client mistakes at info.
func logInterceptor(log *slog.Logger) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			start := time.Now()
			resp, err := next(ctx, req)
			attrs := []any{"procedure", req.Spec().Procedure, "protocol", req.Peer().Protocol, "duration", time.Since(start)}
			if err == nil {
				log.Debug("rpc", attrs...)
				return resp, nil
			}
			code := connect.CodeOf(err)
			attrs = append(attrs, "code", code.String(), "error", err)
			var ce *connect.Error
			if code == connect.CodeInternal || code == connect.CodeUnknown || !errors.As(err, &ce) {
				log.Error("rpc failed", attrs...)
			} else {
				log.Info("rpc failed", attrs...)
			}
			return resp, err
		}
	}
}
