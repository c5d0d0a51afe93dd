package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/server/internal/api"
	"github.com/pawlcfg/pawl/server/internal/metrics"
	"github.com/pawlcfg/pawl/server/internal/rollout"
	"github.com/pawlcfg/pawl/server/internal/tracing"
)

// The operator's HTTP endpoints, served beside the API on the same port
// and behind the same connection limits (docs/METRICS.md).
const (
	// MetricsPath serves Prometheus's text format.
	MetricsPath = "/metrics"
	// HealthzPath answers 200 while the process serves.
	HealthzPath = "/healthz"
	// ReadyzPath answers 200 while the server can serve (its store is
	// reachable and followed, and it is not shutting down), 503 otherwise.
	ReadyzPath = "/readyz"
)

// readyTimeout bounds the store read of one /readyz: a store that does
// not answer within it is not ready.
const readyTimeout = 2 * time.Second

// tracingShutdown bounds how long Close waits to send the last spans.
const tracingShutdown = 5 * time.Second

// observe makes the tracer provider when an OTLP endpoint is configured,
// and the interceptors outside all others: tracing first, so that the
// span covers the whole call, then metrics, which see every refusal.
func observe(ctx context.Context, cfg config, m *metrics.Metrics) (*sdktrace.TracerProvider, []connect.Interceptor, error) {
	observers := []connect.Interceptor{api.MetricsInterceptor(m)}
	if cfg.otlpEndpoint == "" {
		return nil, observers, nil
	}
	tp, err := tracing.New(ctx, cfg.otlpEndpoint)
	if err != nil {
		return nil, nil, err
	}
	traced, err := api.TraceInterceptors(tp)
	if err != nil {
		_ = tp.Shutdown(ctx)
		return nil, nil, err
	}
	cfg.log.Info("tracing: spans are exported over OTLP", "endpoint", cfg.otlpEndpoint)
	return tp, append(traced, observers...), nil
}

// sessionOptions give sessions the tracer provider, when there is one,
// for the spans of the ACKs they carry.
func (s *Server) sessionOptions() []api.SessionOption {
	if s.tracer == nil {
		return nil
	}
	return []api.SessionOption{api.WithSessionTracing(s.tracer)}
}

// stopTracing sends the spans still queued and stops the exporter.
func (s *Server) stopTracing() {
	if s.tracer == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), tracingShutdown)
	defer cancel()
	if err := s.tracer.Shutdown(ctx); err != nil {
		s.cfg.log.Warn("tracing: the last spans were not exported", "endpoint", s.cfg.otlpEndpoint, "error", err)
	}
}

// mountOps serves /metrics, /healthz and /readyz on mux, and registers
// the sources of the metrics that are read at each scrape.
func (s *Server) mountOps(mux *http.ServeMux, rollouts *rollout.Rollouts) {
	s.metrics.Observe(metrics.Sources{
		Watchers: func() int { return s.hub.Stats().Watchers },
		Revision: s.hub.Revision,
		Usage: func(ctx context.Context) (int64, int64, bool, error) {
			u, err := s.StorageUsage(ctx)
			return u.UsedBytes, u.QuotaBytes, u.NoSpace, err
		},
		StageStates: rollouts.StageStates,
		Connections: func() int { return s.ConnStats().Open },
	})
	var scrape http.Handler = s.metrics.Handler()
	if s.cfg.metricsAuth {
		scrape = s.authenticated(scrape)
	}
	mux.Handle(MetricsPath, scrape)
	mux.HandleFunc(HealthzPath, func(w http.ResponseWriter, _ *http.Request) { answer(w, http.StatusOK, "ok") })
	mux.HandleFunc(ReadyzPath, s.readyz)
}

// readyz answers whether the server can serve: 503, with the reason,
// while it shuts down, while it cannot follow its store (the same as
// NOT_SERVING from the gRPC health service), or when the store does not
// answer a read within readyTimeout.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.stopping.Load() {
		answer(w, http.StatusServiceUnavailable, "not ready: the server is shutting down")
		return
	}
	if h, err := s.health.Check(r.Context(), &grpchealth.CheckRequest{Service: pawlv1connect.KVServiceName}); err != nil || h.Status != grpchealth.StatusServing {
		answer(w, http.StatusServiceUnavailable, "not ready: the store cannot be followed (the log says why)")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	if _, err := s.store.Status(ctx); err != nil {
		answer(w, http.StatusServiceUnavailable, fmt.Sprintf("not ready: the store does not answer: %v", err))
		return
	}
	answer(w, http.StatusOK, "ok")
}

// authenticated lets through only requests with a credential of the
// auth file (WithMetricsAuth); others get 401 with the reason.
func (s *Server) authenticated(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := api.Authenticate(r.Context(), s.authn, r.Header.Get("Authorization")); err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="pawld"`)
			msg := err.Error()
			if ce, ok := err.(*connect.Error); ok {
				msg = ce.Message()
			}
			answer(w, http.StatusUnauthorized, "unauthenticated: "+msg+" (pawld --metrics-auth)")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// refusedConn counts a connection that a limit refused, by the limit's
// flag.
func (s *Server) refusedConn(flag string) { s.metrics.Refused(strings.TrimPrefix(flag, "--")) }

// answer writes a plain-text answer and the status.
func answer(w http.ResponseWriter, status int, text string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = fmt.Fprintln(w, text)
}
