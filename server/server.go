package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"golang.org/x/net/http2"

	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/server/internal/api"
	"github.com/pawlcfg/pawl/server/internal/instance"
	"github.com/pawlcfg/pawl/server/internal/release"
	"github.com/pawlcfg/pawl/server/internal/retention"
	"github.com/pawlcfg/pawl/server/internal/rollout"
	"github.com/pawlcfg/pawl/server/internal/store"
	"github.com/pawlcfg/pawl/server/internal/store/boltstore"
	"github.com/pawlcfg/pawl/server/internal/validator"
	"github.com/pawlcfg/pawl/server/internal/watch"
	"github.com/pawlcfg/pawl/validators/host"
)

// Server is a running Pawl node: its store, watch hub and handlers. Create
// one with New and Close it when done.
type Server struct {
	cfg     config
	store   store.Store
	hub     *watch.Hub
	wasm    *host.Runtime
	vals    *validator.Validators
	health  *grpchealth.StaticChecker
	handler http.Handler

	registry *instance.Registry

	// stopBackground ends the supervisor and the lease checkpoint;
	// background waits for them.
	stopBackground context.CancelFunc
	background     sync.WaitGroup

	closeOnce sync.Once
	closeErr  error
}

// pingInterval is how long a connection may stay silent before the server
// pings it, and how long it waits for the answer before closing it: a dead
// instance's stream ends, and stops holding its lease, within two of these,
// well inside a 30-second lease.
const pingInterval = 10 * time.Second

// compressMinBytes is the smallest message the server compresses.
const compressMinBytes = 4 << 10

// services are the names served, for health checking and reflection.
var services = []string{
	pawlv1connect.KVServiceName, pawlv1connect.ValidatorServiceName,
	pawlv1connect.ReleaseServiceName, pawlv1connect.InstanceServiceName, pawlv1connect.RolloutServiceName,
}

// New opens the store in the data directory and starts the watch hub.
func New(ctx context.Context, opts ...Option) (*Server, error) {
	cfg := defaultConfig()
	for _, opt := range opts {
		opt(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	bolt, err := boltstore.Open(ctx, cfg.dataDir)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	var st store.Store = bolt
	if cfg.wrapStore != nil {
		st = cfg.wrapStore(st)
	}
	hub, err := watch.New(ctx, st, watch.WithProgressInterval(cfg.progressInterval), watch.WithRingEvents(cfg.watchRingEvents))
	if err != nil {
		_ = st.Close()
		return nil, fmt.Errorf("server: %w", err)
	}
	cacheDir := cfg.wasmCacheDir
	if cacheDir == "" {
		cacheDir = filepath.Join(cfg.dataDir, "wasm-cache")
	}
	rt, err := host.New(ctx, host.WithCacheDir(cacheDir), host.WithTimeout(cfg.validatorTimeout), host.WithMemoryLimit(cfg.validatorMemory))
	if err != nil {
		hub.Close()
		_ = st.Close()
		return nil, fmt.Errorf("server: %w", err)
	}
	registry, err := instance.New(ctx, st, cfg.instanceLease, instance.WithClock(cfg.now))
	if err != nil {
		_ = rt.Close(ctx)
		hub.Close()
		_ = st.Close()
		return nil, fmt.Errorf("server: %w", err)
	}
	s := &Server{cfg: cfg, store: st, hub: hub, wasm: rt, registry: registry, health: grpchealth.NewStaticChecker(services...)}
	s.vals = validator.New(st, rt, cfg.maxWasmBytes)
	s.handler = s.routes()
	return s, nil
}

func (s *Server) routes() http.Handler {
	// Values up to the limit must reach the handler, which refuses larger
	// ones with a message naming the limit; the slack covers the key and
	// the envelope. Anything far larger is refused by Connect unread.
	readMax := s.cfg.maxValueBytes + 64<<10
	opts := []connect.HandlerOption{
		connect.WithReadMaxBytes(readMax),
		// Compressing small messages costs more CPU than it saves bytes: with
		// thousands of watch streams, gzip of each small event dominated the
		// fan-out profile. Larger messages (big configs, batches) still
		// compress when the client accepts it.
		connect.WithCompressMinBytes(compressMinBytes),
		connect.WithInterceptors(api.LogInterceptor(s.cfg.log)),
	}
	mux := http.NewServeMux()
	mux.Handle(pawlv1connect.NewKVServiceHandler(api.NewKV(s.store, s.hub, s.cfg.maxValueBytes, s.cfg.log), opts...))
	validatorOpts := []connect.HandlerOption{
		connect.WithReadMaxBytes(s.cfg.maxWasmBytes + 64<<10),
		connect.WithCompressMinBytes(compressMinBytes),
		connect.WithInterceptors(api.LogInterceptor(s.cfg.log)),
	}
	mux.Handle(pawlv1connect.NewValidatorServiceHandler(api.NewValidators(s.vals, s.cfg.maxValueBytes, s.cfg.log), validatorOpts...))
	registry := s.registry
	releases := release.New(s.store, s.vals.Run, registry.Members, release.WithClock(s.cfg.now))
	rollouts := rollout.New(s.store, releases, registry, rollout.WithClock(s.cfg.now), rollout.WithLogger(s.cfg.log))
	s.startBackground(rollouts)
	mux.Handle(pawlv1connect.NewReleaseServiceHandler(api.NewReleases(releases, rollouts, s.cfg.log), opts...))
	mux.Handle(pawlv1connect.NewInstanceServiceHandler(api.NewInstances(registry, rollouts, s.hub, s.cfg.log), opts...))
	mux.Handle(pawlv1connect.NewRolloutServiceHandler(api.NewRollouts(rollouts, releases, s.cfg.log), opts...))
	mux.Handle(grpchealth.NewHandler(s.health))
	reflector := grpcreflect.NewStaticReflector(append([]string{grpchealth.HealthV1ServiceName}, services...)...)
	mux.Handle(grpcreflect.NewHandlerV1(reflector))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector))
	return mux
}

// startBackground runs the server's own goroutines: the rollout views, the
// rollout supervisor (it settles rollouts and stops them at their
// deadline) and the lease checkpoint. Close stops them, and waits for them, before it closes the
// store.
func (s *Server) startBackground(rollouts *rollout.Rollouts) {
	ctx, cancel := context.WithCancel(context.Background())
	s.stopBackground = cancel
	s.background.Add(4)
	go func() {
		defer s.background.Done()
		retention.NewCompactor(s.store, retention.Policy{Revisions: s.cfg.retainRevisions, Age: s.cfg.retainFor},
			retention.WithLogger(s.cfg.log)).Run(ctx)
	}()
	go func() {
		defer s.background.Done()
		if err := rollouts.Run(ctx); err != nil {
			s.cfg.log.Error("rollout views did not start", "error", err)
		}
	}()
	go func() {
		defer s.background.Done()
		rollouts.Supervise(ctx, s.cfg.rolloutCheck, s.cfg.log)
	}()
	go func() {
		defer s.background.Done()
		s.registry.Run(ctx, s.cfg.log)
	}()
}

// ApplyRetention compacts the change log to the retention policy now, as
// the server does on its own while the log grows, and returns the compact
// revision: for tools and tests that need the policy applied at a known
// moment.
func (s *Server) ApplyRetention(ctx context.Context) (int64, error) {
	return retention.Apply(ctx, s.store, retention.Policy{Revisions: s.cfg.retainRevisions, Age: s.cfg.retainFor}, time.Now())
}

// Handler serves every Pawl API over Connect, gRPC and gRPC-Web. It needs an
// HTTP/2-capable server for gRPC; Serve provides one.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve serves on ln until ctx is done; then it reports NOT_SERVING to
// health checks, ends every watch stream with Unavailable (clients resume
// from their last revision elsewhere or after a restart), and waits up to
// the shutdown timeout for in-flight requests. It returns nil after a
// graceful stop. The caller still owns Close.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	protocols.SetHTTP2(true)
	srv := &http.Server{
		Handler:   s.handler,
		Protocols: &protocols,
		// Pings find connections that died without a word, so that the
		// assignment streams on them end and release the leases they hold.
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: int(s.cfg.maxStreams), SendPingTimeout: pingInterval, PingTimeout: pingInterval},
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.cfg.log.Handler(), slog.LevelWarn),
	}
	// HTTP/2 (with TLS and without) is served by x/net's server, which
	// takes the settings above and lets us choose how frames are scheduled:
	// the default round-robin scheduler walks every open stream of a
	// connection for each frame it writes, and a connection here carries
	// hundreds of idle assignment streams; the random scheduler only looks
	// at streams that have something to send.
	if err := http2.ConfigureServer(srv, &http2.Server{NewWriteScheduler: func() http2.WriteScheduler {
		return http2.NewRandomWriteScheduler()
	}}); err != nil {
		return fmt.Errorf("server: configure HTTP/2: %w", err)
	}
	errc := make(chan error, 1)
	go func() {
		if s.cfg.tlsCert != "" {
			errc <- srv.ServeTLS(ln, s.cfg.tlsCert, s.cfg.tlsKey)
			return
		}
		errc <- srv.Serve(ln)
	}()
	select {
	case err := <-errc:
		return fmt.Errorf("server: serve: %w", err)
	case <-ctx.Done():
	}
	for _, name := range services {
		s.health.SetStatus(name, grpchealth.StatusNotServing)
	}
	s.hub.Close()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), s.cfg.shutdownTimeout)
	defer cancel()
	err := srv.Shutdown(shutdownCtx)
	if serveErr := <-errc; !errors.Is(serveErr, http.ErrServerClosed) && err == nil {
		err = serveErr
	}
	if err != nil {
		_ = srv.Close()
		return fmt.Errorf("server: shutdown: %w", err)
	}
	return nil
}

// Close stops the rollout supervisor, writes the leases a last time, stops
// the watch hub, releases the validators and closes the store. Call it after Serve has returned; it is
// idempotent.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.stopBackground()
		s.background.Wait()
		s.hub.Close()
		s.vals.Close(context.Background())
		s.closeErr = errors.Join(s.wasm.Close(context.Background()), s.store.Close())
	})
	return s.closeErr
}

// WatchStats are the watch hub's counters.
type WatchStats struct {
	// Watchers is the number of open watch streams.
	Watchers int
	// LogCatchUps counts change-log reads for watchers that were behind
	// the hub's in-memory ring.
	LogCatchUps int64
}

// WatchStats returns the watch hub's counters.
func (s *Server) WatchStats() WatchStats {
	st := s.hub.Stats()
	return WatchStats{Watchers: st.Watchers, LogCatchUps: st.LogCatchUps}
}
