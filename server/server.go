package server

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"golang.org/x/net/http2"

	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/sdk/auditchain"
	"github.com/pawlcfg/pawl/server/internal/api"
	"github.com/pawlcfg/pawl/server/internal/audit"
	"github.com/pawlcfg/pawl/server/internal/auth"
	"github.com/pawlcfg/pawl/server/internal/connlimit"
	"github.com/pawlcfg/pawl/server/internal/console"
	"github.com/pawlcfg/pawl/server/internal/instance"
	"github.com/pawlcfg/pawl/server/internal/metrics"
	"github.com/pawlcfg/pawl/server/internal/records"
	"github.com/pawlcfg/pawl/server/internal/release"
	"github.com/pawlcfg/pawl/server/internal/retention"
	"github.com/pawlcfg/pawl/server/internal/rollout"
	"github.com/pawlcfg/pawl/server/internal/sharedgzip"
	"github.com/pawlcfg/pawl/server/internal/singleton"
	"github.com/pawlcfg/pawl/server/internal/store"
	"github.com/pawlcfg/pawl/server/internal/store/boltstore"
	"github.com/pawlcfg/pawl/server/internal/store/redisstore"
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

	// usage is the store's size against its quota (the store as opened,
	// before any test wrapper).
	usage store.UsageReporter

	registry *instance.Registry
	// audit is the audit log: a file beside the embedded store, or keys
	// of their own in the Redis store.
	audit audit.Log
	// authn reads the auth file; nil without one (open).
	authn *auth.Authenticator
	// closeClient closes the Redis client of a shared store (a no-op for
	// the embedded one), after the store.
	closeClient func()
	// holder names this server in the leases of work that must happen
	// once.
	holder string
	// stopStale stops the store's staleness reports to the server.
	stopStale func()
	// stopping is set when Serve begins to stop: health stays NOT_SERVING.
	stopping atomic.Bool
	// gzip compresses each distinct message that many clients receive
	// alike once (see routes).
	gzip *sharedgzip.Cache

	// stopBackground ends the supervisor and the lease checkpoint;
	// background waits for them.
	stopBackground context.CancelFunc
	background     sync.WaitGroup
	// sessions is the SessionService handler, whose ACKs Close awaits.
	sessions *api.Sessions

	closeOnce sync.Once
	closeErr  error

	// connLimits bound the connections Serve accepts; conns is the
	// listener of the latest Serve, for ConnStats.
	connLimits connlimit.Limits
	conns      atomic.Pointer[connlimit.Listener]
	// clientStreams are the procedures whose request bodies stay open
	// (see withReadDeadline).
	clientStreams map[string]bool

	// metrics are the server's Prometheus series (ops.go); tracer exports
	// spans when WithOTLPEndpoint is given (nil otherwise), and observers
	// are the interceptors outside all others that feed both.
	metrics   *metrics.Metrics
	tracer    *sdktrace.TracerProvider
	observers []connect.Interceptor
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
	pawlv1connect.AuditServiceName, pawlv1connect.MaintenanceServiceName, pawlv1connect.SessionServiceName,
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
	if err := cfg.loadClientCAs(); err != nil {
		return nil, err
	}
	m := metrics.New()
	st, rdb, closeClient, err := openStore(ctx, cfg, m.StoreCommitted)
	if err != nil {
		return nil, err
	}
	limits, err := connLimits(cfg, rdb)
	if err != nil {
		closeClient()
		_ = st.Close()
		return nil, err
	}
	var accepted *redisstore.Acceptance
	if rs, ok := st.(*redisstore.Store); ok {
		accepted = rs.Accepted()
	}
	usage, _ := st.(store.UsageReporter) // both engines are
	if cfg.wrapStore != nil {
		st = cfg.wrapStore(st)
	}
	// What New opens is closed again when a later step fails.
	var undo []func()
	fail := func(err error) (*Server, error) {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
		return nil, fmt.Errorf("server: %w", err)
	}
	undo = append(undo, closeClient, func() { _ = st.Close() })
	auditLog, err := openAudit(ctx, cfg, rdb)
	if err != nil {
		return fail(err)
	}
	if cfg.wrapAudit != nil {
		auditLog = cfg.wrapAudit(auditLog)
	}
	undo = append(undo, func() { _ = auditLog.Close() })
	if accepted != nil {
		if err := recordAcceptance(ctx, cfg, auditLog, accepted); err != nil {
			return fail(err)
		}
	}
	hub, err := watch.New(ctx, st, watch.WithProgressInterval(cfg.progressInterval), watch.WithRingEvents(cfg.watchRingEvents))
	if err != nil {
		return fail(err)
	}
	undo = append(undo, hub.Close)
	cacheDir := cfg.wasmCacheDir
	if cacheDir == "" {
		cacheDir = filepath.Join(cfg.dataDir, "wasm-cache")
	}
	hostOpts := []host.Option{host.WithCacheDir(cacheDir), host.WithTimeout(cfg.validatorTimeout), host.WithMemoryLimit(cfg.validatorMemory),
		host.WithMemoryBudget(cfg.validatorBudget), host.WithModuleLimits(cfg.validatorLimits), host.WithCompileTimeout(cfg.compileTimeout)}
	if cfg.maxCompiles != 0 {
		hostOpts = append(hostOpts, host.WithMaxCompiles(cfg.maxCompiles))
	}
	if cfg.compileProcess != nil {
		hostOpts = append(hostOpts, host.WithCompileProcess(cfg.compileProcess))
	}
	rt, err := host.New(ctx, hostOpts...)
	if err != nil {
		return fail(err)
	}
	undo = append(undo, func() { _ = rt.Close(context.Background()) })
	regOpts := []instance.Option{instance.WithClock(cfg.now)}
	_, shared := st.(store.Leaser)
	if shared {
		regOpts = append(regOpts, instance.WithShared())
	}
	registry, err := instance.New(ctx, st, cfg.instanceLease, regOpts...)
	if err != nil {
		return fail(err)
	}
	var authn *auth.Authenticator
	if cfg.authFile != "" {
		if authn, err = auth.NewAuthenticator(cfg.authFile, cfg.now); err != nil {
			return fail(err)
		}
	}
	tracer, observers, err := observe(ctx, cfg, m)
	if err != nil {
		return fail(err)
	}
	s := &Server{cfg: cfg, store: st, usage: usage, audit: auditLog, closeClient: closeClient, hub: hub, wasm: rt, registry: registry, authn: authn, health: grpchealth.NewStaticChecker(services...), holder: newHolderID(),
		gzip: sharedgzip.NewCache(64, 64<<20), connLimits: limits, metrics: m, tracer: tracer, observers: observers}
	if n, ok := st.(store.StaleNotifier); ok {
		s.stopStale = n.NotifyStale(s.feedStale)
	}
	s.vals = validator.New(st, rt, cfg.maxWasmBytes, validator.WithMetrics(m))
	s.handler = s.routes()
	s.clientStreams = clientStreams(slices.Concat(services, []string{grpchealth.HealthV1ServiceName, grpcreflect.ReflectV1ServiceName, grpcreflect.ReflectV1AlphaServiceName})...)
	return s, nil
}

// ValidatorStats returns the counters of the validator runtime: the
// compilations started and running, and the instances against the memory
// budget.
func (s *Server) ValidatorStats() host.Stats { return s.wasm.Stats() }

// connLimits are the connection limits of cfg. Without a total, it is the
// process's limit of open files less what the server keeps for its own
// (fdReserve, and the Redis client's pool when rdb is one) and less the
// reserve of the admin networks, which are file descriptors too.
func connLimits(cfg config, rdb redis.UniversalClient) (connlimit.Limits, error) {
	limits := connlimit.Limits{Total: cfg.maxConns, PerAddress: cfg.maxConnsPerAddr, Reserved: cfg.reservedConns, Trusted: cfg.adminNetworks,
		TotalFlag: "--max-conns", PerAddressFlag: "--max-conns-per-address", ReservedFlag: "--reserved-conns"}
	if limits.Total > 0 {
		return limits, nil
	}
	files, ok := connlimit.FileLimit()
	if !ok {
		limits.Total = noFileLimitConns
		return limits, nil
	}
	kept := fdReserve + redisPoolFiles(rdb) + cfg.reservedConns
	if int64(files)-int64(kept) < minDerivedConns {
		return limits, fmt.Errorf("server: the process may open %d files (RLIMIT_NOFILE), and keeps %d of them for the store, the audit log, the Redis pool "+
			"and the reserve of --reserved-conns: fewer than %d are left for connections; raise the limit (ulimit -n, LimitNOFILE=) or set --max-conns (WithConnLimits)",
			files, kept, minDerivedConns)
	}
	limits.Total = int(files) - kept
	return limits, nil
}

// minDerivedConns is the fewest connections a total derived from
// RLIMIT_NOFILE may allow: fewer means a limit of open files too small to
// serve a fleet, which New reports rather than serve a handful.
const minDerivedConns = 64

// noFileLimitConns is the total where the process has no limit of open
// files to derive it from.
const noFileLimitConns = 100_000

// redisPoolFiles is how many connections the Redis client may hold: its
// pool (per node of a cluster it was given), with its Pub/Sub and Sentinel
// connections besides.
func redisPoolFiles(rdb redis.UniversalClient) int {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().PoolSize + 8
	case *redis.ClusterClient:
		return c.Options().PoolSize*max(3, len(c.Options().Addrs)) + 8
	case nil:
		return 0
	}
	return 10*runtime.GOMAXPROCS(0) + 8 // go-redis's default pool
}

func (s *Server) routes() http.Handler {
	// Values up to the limit must reach the handler, which refuses larger
	// ones with a message naming the limit; the slack covers the key and
	// the envelope. Anything far larger is refused by Connect unread.
	readMax := s.cfg.maxValueBytes + 64<<10
	// A transaction's envelope carries a few bytes per op besides its
	// keys and values.
	kvReadMax := max(s.cfg.maxValueBytes, s.cfg.maxTxnBytes) + 16*s.cfg.maxTxnOps + 64<<10
	wasmReadMax := s.cfg.maxWasmBytes + 64<<10
	registry := s.registry
	releases := release.New(s.store, s.vals.Run, registry.Members, release.WithClock(s.cfg.now))
	rollouts := rollout.New(s.store, releases, registry, rollout.WithClock(s.cfg.now), rollout.WithLogger(s.cfg.log),
		rollout.WithAckBatchObserver(s.metrics.AckBatch))
	// One limiter for every service, reflection and health too, so that a
	// principal's streams count together.
	streamLimit := api.StreamLimitInterceptor(s.cfg.streamLimits)
	opts := []connect.HandlerOption{
		// One byte above the limit that api.LimitBody enforces (below),
		// which refuses what is over it with a message naming the flags.
		connect.WithReadMaxBytes(readMax + 1),
		// Compressing small messages costs more CPU than it saves bytes: with
		// thousands of watch streams, gzip of each small event dominated the
		// fan-out profile. Larger messages (big configs, batches) still
		// compress when the client accepts it.
		connect.WithCompressMinBytes(compressMinBytes),
		// Tracing and metrics see every call and every refusal (ops.go).
		connect.WithInterceptors(s.observers...),
		// The audit interceptor wraps the auth interceptor, so that it
		// records refusals too, with the principal the auth interceptor
		// found (or the caller's address when none was).
		// The stream limits count by the principal the auth interceptor
		// found, so they come after it.
		connect.WithInterceptors(api.LogInterceptor(s.cfg.log), api.AuditInterceptor(s.audit, api.Caller(s.authn != nil), s.cfg.now, s.cfg.log),
			api.AuthInterceptor(s.authn, registry, rollouts, s.cfg.log), streamLimit, api.TextInterceptor(s.cfg.maxTextBytes)),
	}
	// What many clients receive alike (a change fanned out to watch
	// streams, a release or a validator module downloaded by a fleet) is
	// compressed once, not once per client; listings and statuses, each
	// their own, keep the plain gzip and its memory.
	// gzip requests inflate up to each route's read limit, and are refused
	// past it with the message that names the flags (api.GzipRequests).
	msgs := s.bodyLimitMessages()
	opts = append(opts, api.GzipRequests(readMax, msgs.other.flag, msgs.other.limits, api.GzipCompressor))
	shared := append(slices.Clone(opts), api.GzipRequests(readMax, msgs.other.flag, msgs.other.limits, s.gzip.Compressor))
	mux := http.NewServeMux()
	kv := api.NewKV(s.store, s.hub, s.cfg.maxValueBytes, api.TxnLimits{Ops: s.cfg.maxTxnOps, Bytes: s.cfg.maxTxnBytes}, s.cfg.log)
	kvPath, kvHandler := pawlv1connect.NewKVServiceHandler(kv, append(slices.Clone(opts), connect.WithReadMaxBytes(kvReadMax+1),
		api.GzipRequests(kvReadMax, msgs.kv.flag, msgs.kv.limits, api.GzipCompressor))...)
	mux.Handle(kvPath, kvHandler)
	_, watchHandler := pawlv1connect.NewKVServiceHandler(kv, shared...)
	mux.Handle(pawlv1connect.KVServiceWatchProcedure, watchHandler) // the exact path wins over the service's
	validatorOpts := append(slices.Clone(shared), connect.WithReadMaxBytes(wasmReadMax+1), api.GzipRequests(wasmReadMax, msgs.wasm.flag, msgs.wasm.limits, s.gzip.Compressor))
	mux.Handle(pawlv1connect.NewValidatorServiceHandler(api.NewValidators(s.vals, s.cfg.maxValueBytes, s.cfg.log), validatorOpts...))
	s.startBackground(rollouts)
	mux.Handle(pawlv1connect.NewReleaseServiceHandler(api.NewReleases(releases, rollouts, s.cfg.log), shared...))
	instances := api.NewInstances(registry, rollouts, s.hub, s.cfg.log)
	mux.Handle(pawlv1connect.NewInstanceServiceHandler(instances, shared...))
	// An instance's session: one stream for its registration, lease,
	// assignments, ACKs and watches (counted as one stream by the limits).
	// Its messages go uncompressed, as etcd's watches and Envoy's
	// discovery streams do by default: each session's message is its own
	// (no compression to share), and compressing a change fanned out to
	// every session was most of the fan-out's CPU (docs/BENCHMARKS.md).
	// Compressed requests are still read.
	sessionOpts := append(slices.Clone(opts), connect.WithCompressMinBytes(math.MaxInt))
	s.sessions = api.NewSessions(instances, releases, s.store, s.cfg.maxSessionWatches, s.cfg.log, s.sessionOptions()...)
	mux.Handle(pawlv1connect.NewSessionServiceHandler(s.sessions, sessionOpts...))
	mux.Handle(pawlv1connect.NewRolloutServiceHandler(api.NewRollouts(rollouts, releases, s.cfg.log), opts...))
	mux.Handle(pawlv1connect.NewAuditServiceHandler(api.NewAudit(s.audit, s.cfg.log), opts...))
	mux.Handle(pawlv1connect.NewMaintenanceServiceHandler(api.NewMaintenance(s.store, s.usage, s.cfg.log), opts...))
	mux.Handle(console.Path, console.Handler()) // the operator console (its API calls go through the interceptors above)
	// Health checks need no credential (load balancers carry none), but
	// their watch streams count against the caller's stream limit.
	mux.Handle(grpchealth.NewHandler(s.health, connect.WithInterceptors(api.LogInterceptor(s.cfg.log), streamLimit)))
	// Reflection streams are bidirectional and live as long as their
	// client: they get every interceptor, so that they need a credential
	// (any principal's) and count against the stream limit.
	reflector := grpcreflect.NewStaticReflector(append([]string{grpchealth.HealthV1ServiceName}, services...)...)
	mux.Handle(grpcreflect.NewHandlerV1(reflector, opts...))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector, opts...))
	s.mountOps(mux, rollouts)
	return s.metrics.Middleware(withCORS(withAuthContext(s.limitBodies(mux, readMax, kvReadMax, wasmReadMax)), s.cfg.corsOrigins))
}

// limitBodies guards every request body (api.LimitBody) with the read
// limit of its route: KV calls, validator calls, and every other call,
// each refused over it with a message naming the flags that make it up.
func (s *Server) limitBodies(next http.Handler, readMax, kvReadMax, wasmReadMax int) http.Handler {
	msgs := s.bodyLimitMessages()
	other := api.LimitBody(next, readMax, msgs.other.flag, msgs.other.limits)
	kv := api.LimitBody(next, kvReadMax, msgs.kv.flag, msgs.kv.limits)
	wasm := api.LimitBody(next, wasmReadMax, msgs.wasm.flag, msgs.wasm.limits)
	kvPrefix := "/" + pawlv1connect.KVServiceName + "/"
	validatorPrefix := "/" + pawlv1connect.ValidatorServiceName + "/"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, kvPrefix) && r.URL.Path != pawlv1connect.KVServiceWatchProcedure:
			kv.ServeHTTP(w, r)
		case strings.HasPrefix(r.URL.Path, validatorPrefix):
			wasm.ServeHTTP(w, r)
		default:
			other.ServeHTTP(w, r)
		}
	})
}

// bodyLimitMessages say what the read limit of each route is made of:
// the pawld flags behind it.
type bodyLimitMessages struct{ other, kv, wasm bodyLimit }

// bodyLimit is one route's read limit: the main flag behind it (named in
// the refusal's LimitExceeded detail) and what it is made of.
type bodyLimit struct{ flag, limits string }

func (s *Server) bodyLimitMessages() bodyLimitMessages {
	values := fmt.Sprintf("a value or a release's content may be up to %d bytes (pawld --max-value-bytes)", s.cfg.maxValueBytes)
	kvFlag := "--max-value-bytes"
	if s.cfg.maxTxnBytes > s.cfg.maxValueBytes {
		kvFlag = "--max-txn-bytes"
	}
	return bodyLimitMessages{
		other: bodyLimit{"--max-value-bytes", values + "; raise it to send larger ones"},
		kv: bodyLimit{kvFlag, fmt.Sprintf("%s, and a transaction up to %d bytes of keys and values in %d ops "+
			"(--max-txn-bytes, --max-txn-ops); raise them to send larger ones", values, s.cfg.maxTxnBytes, s.cfg.maxTxnOps)},
		wasm: bodyLimit{"--max-validator-bytes", fmt.Sprintf("a validator module may be up to %d bytes (pawld --max-validator-bytes); "+
			"raise it to upload larger ones", s.cfg.maxWasmBytes)},
	}
}

// withAuthContext puts on each request's context the client certificate
// chains that the TLS handshake verified, where the auth interceptor finds
// them, and a slot where it records the principal, where interceptors
// wrapped around it (an audit of refused calls) find it
// (auth.PrincipalFrom).
func withAuthContext(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := auth.WithSlot(r.Context())
		if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
			ctx = auth.WithPeerCertificates(ctx, r.TLS.VerifiedChains)
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// ReloadAuth reads the auth file again and uses it for every call from
// now on; open streams keep the principal they started with. A file that
// cannot be read or is malformed leaves the one in use in place and is
// logged with the reason, which the error also says. Without an auth file
// it does nothing.
func (s *Server) ReloadAuth() error {
	if s.authn == nil {
		return nil
	}
	if err := s.authn.Reload(); err != nil {
		s.cfg.log.Error("auth file not reloaded; the previous one stays in use", "file", s.authn.Path(), "error", err)
		s.auditTokenChange(connect.CodeInvalidArgument.String(), fmt.Sprintf("auth file %s not reloaded; the previous one stays in use: %v", s.authn.Path(), err))
		return fmt.Errorf("server: reload auth: %w", err)
	}
	tokens, certs := s.authn.Counts()
	s.cfg.log.Info("auth file reloaded", "file", s.authn.Path(), "tokens", tokens, "certificates", certs)
	s.auditTokenChange(auditchain.OutcomeOK, fmt.Sprintf("auth file %s reloaded: %d tokens, %d certificate principals", s.authn.Path(), tokens, certs))
	return nil
}

// ReloadAuthProcedure is what the audit log names a reload of the auth
// file (pawld on SIGHUP): the change of tokens.
const ReloadAuthProcedure = "pawld/ReloadAuth"

// auditTokenChange records a reload of the auth file in the audit log; the
// principal is pawld itself, acting on its operator's signal.
func (s *Server) auditTokenChange(outcome, message string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec := auditchain.Record{Time: auditchain.FormatTime(s.cfg.now()), Principal: "pawld", Procedure: ReloadAuthProcedure,
		RequestID: audit.NewRequestID(), Outcome: outcome, Message: message}
	if _, err := s.audit.Append(ctx, rec); err != nil {
		s.cfg.log.Error("the reload of the auth file went unaudited", "error", err)
	}
}

// Authenticated reports whether the server authenticates its callers (it
// was given an auth file); without one every caller may do everything.
func (s *Server) Authenticated() bool { return s.authn != nil }

// startBackground runs the server's own goroutines: the compactor, the
// rollout views, the rollout supervisor (it settles rollouts and stops
// them at their deadline), the lease checkpoint and the log of the
// NOSPACE alarm. With a shared store,
// the compactor and the supervisor run on one replica at a time, under a
// lease (package singleton). Close stops them, and waits for them, before it closes the
// store.
func (s *Server) startBackground(rollouts *rollout.Rollouts) {
	ctx, cancel := context.WithCancel(context.Background())
	s.stopBackground = cancel
	s.background.Add(5)
	go func() {
		defer s.background.Done()
		s.watchQuota(ctx, s.cfg.quotaCheck)
	}()
	go func() {
		defer s.background.Done()
		singleton.Run(ctx, s.store, "compactor", s.holder, s.cfg.workLease, s.cfg.log, func(ctx context.Context) {
			retention.NewCompactor(s.store, s.retention(), retention.WithLogger(s.cfg.log)).Run(ctx)
		})
	}()
	go func() {
		defer s.background.Done()
		if err := rollouts.Run(ctx); err != nil {
			s.cfg.log.Error("rollout views did not start", "error", err)
		}
	}()
	go func() {
		defer s.background.Done()
		singleton.Run(ctx, s.store, "rollout-supervisor", s.holder, s.cfg.workLease, s.cfg.log, func(ctx context.Context) {
			rollouts.Supervise(ctx, s.cfg.rolloutCheck, s.cfg.log)
		})
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
	return retention.Apply(ctx, s.store, s.retention(), time.Now())
}

// retention is the change log's retention policy.
func (s *Server) retention() retention.Policy {
	return retention.Policy{Revisions: s.cfg.retainRevisions, Age: s.cfg.retainFor,
		Uncounted: records.ReportPrefixes, LogRevisions: s.cfg.retainLog}
}

// Handler serves every Pawl API over Connect, gRPC and gRPC-Web. It needs an
// HTTP/2-capable server for gRPC; Serve provides one.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve serves on ln until ctx is done; then it reports NOT_SERVING to
// health checks, ends every watch stream and session with Unavailable
// (clients resume from their last revision elsewhere or after a
// restart), and waits up to the shutdown timeout for in-flight requests.
// It returns nil after a graceful stop. Past the timeout it closes the
// connections left (a client that stopped reading its stream holds a
// send that only this ends) and returns an error wrapping
// context.DeadlineExceeded. The caller still owns Close.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	protocols.SetHTTP2(true)
	srv := &http.Server{
		Handler:   withReadDeadline(s.handler, s.cfg.readTimeout, s.clientStreams),
		Protocols: &protocols,
		// Pings find connections that died without a word, so that the
		// assignment streams on them end and release the leases they hold.
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: int(s.cfg.maxStreams), SendPingTimeout: pingInterval, PingTimeout: pingInterval},
		ReadHeaderTimeout: s.cfg.readHeaderTimeout,
		// No ReadTimeout: withReadDeadline bounds each request's body
		// instead (its comment says why). An HTTP/2 connection is idle
		// while it carries no stream: one holding a watch never is.
		IdleTimeout: s.cfg.idleTimeout,
		ErrorLog:    slog.NewLogLogger(s.cfg.log.Handler(), slog.LevelWarn),
	}
	limited, err := connlimit.New(ln, s.connLimits, connlimit.WithLogger(s.cfg.log), connlimit.WithRefusalHook(s.refusedConn))
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	s.conns.Store(limited)
	ln = limited
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
	if s.cfg.clientCAs != nil {
		// A client may present a certificate (its principal is then the
		// certificate's) or not (and send a bearer token): one that it
		// presents must verify against the client CA, or the handshake
		// fails.
		srv.TLSConfig = &tls.Config{ClientCAs: s.cfg.clientCAs, ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12}
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
	s.stopping.Store(true)
	for _, name := range services {
		s.health.SetStatus(name, grpchealth.StatusNotServing)
	}
	s.hub.Close()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), s.cfg.shutdownTimeout)
	defer cancel()
	err = srv.Shutdown(shutdownCtx)
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
		if s.stopStale != nil {
			s.stopStale()
		}
		s.hub.Close()
		if s.sessions != nil {
			s.sessions.Wait() // the ACKs of sessions that ended, before the audit log closes
		}
		s.vals.Close(context.Background())
		s.closeErr = errors.Join(s.audit.Close(), s.wasm.Close(context.Background()), s.store.Close())
		s.closeClient()
		s.stopTracing()
	})
	return s.closeErr
}

// ConnStats are the counters of the connections Serve accepts.
type ConnStats struct {
	// Open is the number of connections open now.
	Open int
	// Refused counts the connections closed at once for a limit
	// (WithConnLimits).
	Refused int64
	// Limit is the total (WithConnLimits; derived from RLIMIT_NOFILE
	// unless given), beyond which only the admin networks' reserve is
	// open.
	Limit int
}

// ConnStats returns the counters of the latest Serve's listener (zero
// before Serve).
func (s *Server) ConnStats() ConnStats {
	st := ConnStats{Limit: s.connLimits.Total}
	if l := s.conns.Load(); l != nil {
		c := l.Stats()
		st.Open, st.Refused = c.Open, c.Refused
	}
	return st
}

// WatchStats are the watch hub's counters.
type WatchStats struct {
	// Watchers is the number of open watch streams.
	Watchers int
	// LogCatchUps counts change-log reads for watchers that were behind
	// the hub's in-memory ring.
	LogCatchUps int64
	// Compressions counts the messages the server gzipped; a message
	// sent the same to many streams (a change fanned out) counts once.
	Compressions int64
}

// WatchStats returns the watch hub's counters.
func (s *Server) WatchStats() WatchStats {
	st := s.hub.Stats()
	return WatchStats{Watchers: st.Watchers, LogCatchUps: st.LogCatchUps, Compressions: s.gzip.Compressed()}
}

// openStore opens the store the configuration names: Redis at its URL, or
// the embedded store in the data directory. closeClient closes what the
// store does not own (the Redis client, rdb, nil for the embedded store).
func openStore(ctx context.Context, cfg config, observe store.CommitObserver) (st store.Store, rdb redis.UniversalClient, closeClient func(), err error) {
	quota := storeQuota(cfg.quotaBytes)
	if cfg.storeURL == "" {
		bolt, err := boltstore.Open(ctx, cfg.dataDir, boltstore.WithQuota(quota), boltstore.WithCommitObserver(observe))
		if err != nil {
			return nil, nil, nil, fmt.Errorf("server: %w", err)
		}
		if n := bolt.Recovered(); n > 0 {
			cfg.log.Info("recovered changes from the write-ahead log", "changes", n, "revision", bolt.Revision())
		}
		return bolt, nil, func() {}, nil
	}
	redisstore.SetLogger(cfg.log)
	rdb, err = redisstore.NewClient(cfg.storeURL)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("server: %w", err)
	}
	rs, err := redisstore.Open(ctx, rdb, cfg.redisPrefix, append(slices.Clone(cfg.redisOpts), redisstore.WithQuota(quota), redisstore.WithCommitObserver(observe))...)
	if err != nil {
		_ = rdb.Close()
		return nil, nil, nil, fmt.Errorf("server: open the store at %s: %w", cfg.storeURL, err)
	}
	if d := rs.Durability(ctx); d.Known {
		cfg.log.Info("redis durability: "+d.Promise, "appendonly", d.AppendOnly, "appendfsync", d.AppendFsync, "save", d.Save)
	} else {
		cfg.log.Warn("redis durability: " + d.Promise)
	}
	return rs, rdb, func() { _ = rdb.Close() }, nil
}

// openAudit opens the audit log beside the store: the file audit.log in
// the data directory of the embedded store, or the Redis store's own audit
// keys (rdb is its client).
func openAudit(ctx context.Context, cfg config, rdb redis.UniversalClient) (audit.Log, error) {
	if rdb != nil {
		return audit.OpenRedis(ctx, rdb, cfg.redisPrefix)
	}
	l, err := audit.OpenFile(filepath.Join(cfg.dataDir, audit.FileName))
	if err != nil {
		return nil, err
	}
	if n := l.Truncated(); n > 0 {
		cfg.log.Warn("cut the torn last line of the audit log (a crash in the middle of a write; it was never acknowledged)", "bytes", n)
	}
	return l, nil
}

// newHolderID names this server process in leases: its host, its process
// and a random part, so that a restarted process is another holder.
func newHolderID() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// feedStale hears from a shared store when this server stops following it
// (Redis is unreachable) and when it follows again: it logs why, and
// reports NOT_SERVING to health checks meanwhile, so that load balancers
// send clients to replicas that follow. Watch streams say so themselves.
func (s *Server) feedStale(err error) {
	status := grpchealth.StatusServing
	if err != nil {
		status = grpchealth.StatusNotServing
		s.cfg.log.Warn("the store cannot be followed; watchers are told they are stale", "error", err)
	} else {
		s.cfg.log.Info("the store is followed again")
	}
	if s.stopping.Load() {
		return
	}
	for _, name := range services {
		s.health.SetStatus(name, status)
	}
}

// recordAcceptance logs and audits the rollback of the Redis store that
// WithRedisAcceptRollback accepted.
func recordAcceptance(ctx context.Context, cfg config, l audit.Log, a *redisstore.Acceptance) error {
	msg := fmt.Sprintf("accepted a rollback of the Redis store: Redis held revision %d while revision %d had been handed out "+
		"(incarnation %s, found %q); the store continues from what Redis holds, at revision %d, and every watcher takes a snapshot",
		a.Head, a.Highest, a.Incarnation, a.Found, a.ContinuedAt)
	cfg.log.Warn(msg, "head", a.Head, "highest", a.Highest, "continued_at", a.ContinuedAt)
	host, _ := os.Hostname()
	_, err := l.Append(ctx, auditchain.Record{
		Time:      cfg.now().UTC().Format(time.RFC3339Nano),
		Principal: "operator@" + host,
		Procedure: "pawld --redis-accept-rollback",
		RequestID: newHolderID(),
		Outcome:   auditchain.OutcomeOK,
		Message:   msg,
		Subject:   auditchain.Subject{Key: redisstore.MarkerKey},
	})
	if err != nil {
		return fmt.Errorf("audit the accepted rollback: %w", err)
	}
	return nil
}
