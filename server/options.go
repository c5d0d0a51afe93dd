package server

import (
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/pawlcfg/pawl/server/internal/api"
	"github.com/pawlcfg/pawl/server/internal/audit"
	"github.com/pawlcfg/pawl/server/internal/retention"
	"github.com/pawlcfg/pawl/server/internal/store"
	"github.com/pawlcfg/pawl/server/internal/store/redisstore"
	"github.com/pawlcfg/pawl/server/internal/tracing"
	"github.com/pawlcfg/pawl/validators/host"
)

// Option configures New.
type Option func(*config)

type config struct {
	dataDir          string
	storeURL         string
	redisPrefix      string
	workLease        time.Duration
	redisOpts        []redisstore.Option
	maxValueBytes    int
	maxTxnOps        int
	maxTxnBytes      int
	maxTextBytes     int
	retainRevisions  int64
	retainFor        time.Duration
	retainLog        int64
	quotaBytes       int64
	quotaCheck       time.Duration
	progressInterval time.Duration
	watchRingEvents  int
	shutdownTimeout  time.Duration
	maxStreams       uint32
	tlsCert, tlsKey  string
	tlsClientCA      string
	clientCAs        *x509.CertPool
	authFile         string
	maxWasmBytes     int
	wasmCacheDir     string
	validatorTimeout time.Duration
	validatorMemory  int
	validatorBudget  int
	validatorLimits  host.ModuleLimits
	compileTimeout   time.Duration
	maxCompiles      int
	compileProcess   []string
	instanceLease    time.Duration
	rolloutCheck     time.Duration
	now              func() time.Time
	log              *slog.Logger

	// The connection, stream and watcher limits (docs/LIMITS.md).
	readHeaderTimeout time.Duration
	readTimeout       time.Duration
	idleTimeout       time.Duration
	maxConns          int
	maxConnsPerAddr   int
	reservedConns     int
	adminNetworks     []netip.Prefix
	streamLimits      api.StreamLimits
	maxSessionWatches int
	// corsOrigins may call from a browser (WithCORSOrigins).
	corsOrigins []string

	// Observability (docs/METRICS.md).
	metricsAuth  bool
	otlpEndpoint string
	// wrapStore, set only by tests (export_test.go), wraps the opened store
	// to inject faults between what a request reads and what it writes.
	wrapStore func(store.Store) store.Store
	// wrapAudit, set only by tests, wraps the audit log to make its
	// appends fail.
	wrapAudit func(audit.Log) audit.Log
}

const (
	// DefaultDataDir is where the embedded store lives unless told otherwise.
	DefaultDataDir = "./pawl-data"
	// DefaultMaxValueBytes is the largest value accepted: 1 MiB, as etcd's
	// default request limit, which keeps one watch message small.
	DefaultMaxValueBytes = 1 << 20
	// DefaultMaxTxnOps is the most changes one transaction may make: far
	// above Consul's 64, enough for a deploy of thousands of keys at once.
	DefaultMaxTxnOps = 4096
	// DefaultMaxTxnBytes is the most bytes of keys and values one
	// transaction may carry (Consul: 512 KB). A watcher receives a
	// transaction as one message: gRPC clients whose receive limit is the
	// usual 4 MiB need a higher one for the largest.
	DefaultMaxTxnBytes = 4 << 20
	// DefaultMaxTextBytes bounds every string of a request (ACK and stop
	// reasons, names, labels, selectors, identities...): 4 KiB holds a
	// reason of a few dozen lines, and is also the least WithMaxTextBytes
	// accepts, because the SDK cuts the ACK reasons it sends to it (an
	// instance must never lose an ACK to the bound).
	DefaultMaxTextBytes = 4096
	// DefaultMaxValidatorBytes is the largest validator module accepted.
	DefaultMaxValidatorBytes = host.DefaultMaxModuleBytes
	// DefaultValidatorTimeout bounds one validation.
	DefaultValidatorTimeout = host.DefaultTimeout
	// DefaultValidatorMemory bounds one validator instance's memory.
	DefaultValidatorMemory = host.DefaultMemoryLimit
	// DefaultValidatorMemoryBudget bounds the memory of all validator
	// instances together: 16 of DefaultValidatorMemory.
	DefaultValidatorMemoryBudget = host.DefaultMemoryBudget
	// DefaultValidatorCompileTimeout bounds one validator's compilation.
	DefaultValidatorCompileTimeout = host.DefaultCompileTimeout
	// DefaultInstanceLease is how long a registration or heartbeat keeps an
	// instance live: instances heartbeat at a third of it, so two lost
	// heartbeats are survived.
	DefaultInstanceLease = 30 * time.Second
	// DefaultRolloutCheckInterval is how often the server compares the
	// earliest rollout deadline with its clock again, besides the timer
	// that wakes it at that deadline.
	DefaultRolloutCheckInterval = time.Second
	// DefaultRetainRevisions is how many revisions the change log keeps.
	DefaultRetainRevisions = retention.DefaultRevisions
	// DefaultRetainFor is how long the change log keeps a revision.
	DefaultRetainFor = retention.DefaultAge
	// DefaultRetainLogRevisions is how many revisions of any kind, instances'
	// reports included, the change log keeps at most.
	DefaultRetainLogRevisions = retention.DefaultLogRevisions
	// DefaultRedisPrefix is the key prefix of the store in Redis unless
	// told otherwise.
	DefaultRedisPrefix = "pawl"
	// DefaultWorkLease is how long a replica's lease on work that must
	// happen once (the rollout supervisor, compaction) lasts without
	// renewal: when the replica dies, another takes the work over within
	// it.
	DefaultWorkLease = 10 * time.Second
	// DefaultProgressInterval is how often an idle watch stream gets a
	// progress notification.
	DefaultProgressInterval = 10 * time.Second
	// DefaultReadHeaderTimeout is how long a client has to send a
	// request's headers (and a TLS handshake) once it connected or its
	// previous request was answered.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultReadTimeout is how long a client has to send a request's
	// body once its headers arrived: a 16 MiB validator module at 2 Mbit/s.
	// A stream's body is its one request message; the stream then lives
	// on.
	DefaultReadTimeout = time.Minute
	// DefaultIdleTimeout is how long a connection may carry no request
	// and no stream before the server closes it: longer than Go's clients
	// keep an idle connection (90 s), so that the client, not the server,
	// closes it first, and no request races the close.
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultMaxConnsPerAddress is how many connections one remote address
	// outside the admin networks may hold: a fleet of 10,000 instances
	// (the scale the benchmarks measure) behind one NAT address, each
	// holding one HTTP/2 connection, fits.
	DefaultMaxConnsPerAddress = 10_000
	// DefaultReservedConns is how many connections beyond the total only
	// the admin networks may open, so that an operator and health checks
	// get in when every other slot is taken (PostgreSQL reserves 3 for
	// superusers; a health checker, an operator's CLI and a few scripts
	// need more).
	DefaultReservedConns = 32
	// DefaultMaxWatchersPerPrincipal is how many watch streams (KV and
	// assignment watches) one principal, or one address without an auth
	// file, may hold open: a fleet of 10,000 instances sharing a token or
	// a NAT address, each following its assignments and one key prefix,
	// fits. At about 19 KiB of memory per idle stream (docs/BENCHMARKS.md)
	// that is 380 MiB.
	DefaultMaxWatchersPerPrincipal = 20_000
	// DefaultMaxSessionWatches is how many watches one session may hold
	// open: far more than an SDK instance opens (a watch per followed
	// prefix), few enough that one session's watches stay a small part of
	// the server's memory (about 2 KB each).
	DefaultMaxSessionWatches = 1000
	// DefaultMaxStreamsPerPrincipal is how many streams of any kind one
	// principal may hold open: its watchers and 5,000 downloads or
	// snapshots besides.
	DefaultMaxStreamsPerPrincipal = 25_000
)

// DefaultValidatorModuleLimits bound the shape of a validator module:
// generous for real modules, and each function compiles in under a second
// (host.DefaultModuleLimits says how they were measured).
var DefaultValidatorModuleLimits = host.DefaultModuleLimits

// fdReserve is how many file descriptors the server keeps for its own
// files when it derives the connection limit from RLIMIT_NOFILE: the
// store's database and write-ahead log segments, the audit log, the
// validator cache, standard streams, listeners and the profiles' server,
// with room to spare. A Redis store adds its client's pool.
const fdReserve = 256

// DefaultAdminNetworks are the networks whose connections may use the
// reserve and have no per-address limit: loopback.
func DefaultAdminNetworks() []netip.Prefix {
	return []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
}

func defaultConfig() config {
	return config{
		dataDir:          DefaultDataDir,
		redisPrefix:      DefaultRedisPrefix,
		workLease:        DefaultWorkLease,
		maxValueBytes:    DefaultMaxValueBytes,
		maxTxnOps:        DefaultMaxTxnOps,
		maxTxnBytes:      DefaultMaxTxnBytes,
		maxTextBytes:     DefaultMaxTextBytes,
		retainRevisions:  DefaultRetainRevisions,
		retainFor:        DefaultRetainFor,
		retainLog:        DefaultRetainLogRevisions,
		progressInterval: DefaultProgressInterval,
		quotaBytes:       DefaultQuotaBytes,
		quotaCheck:       quotaCheckInterval,
		watchRingEvents:  4096,
		// Long enough for in-flight writes to commit, short enough that an
		// orchestrator's kill timeout (often 30s) does not strike first.
		shutdownTimeout: 10 * time.Second,
		// Each instance in a fleet holds one or two streams, but a proxy or a
		// test client multiplexes thousands on one connection.
		maxStreams:       10_000,
		maxWasmBytes:     DefaultMaxValidatorBytes,
		validatorTimeout: DefaultValidatorTimeout,
		validatorMemory:  DefaultValidatorMemory,
		validatorBudget:  DefaultValidatorMemoryBudget,
		validatorLimits:  DefaultValidatorModuleLimits,
		compileTimeout:   DefaultValidatorCompileTimeout,
		instanceLease:    DefaultInstanceLease,
		rolloutCheck:     DefaultRolloutCheckInterval,
		now:              time.Now,
		log:              slog.Default(),

		readHeaderTimeout: DefaultReadHeaderTimeout,
		readTimeout:       DefaultReadTimeout,
		idleTimeout:       DefaultIdleTimeout,
		maxConnsPerAddr:   DefaultMaxConnsPerAddress,
		reservedConns:     DefaultReservedConns,
		adminNetworks:     DefaultAdminNetworks(),
		streamLimits:      api.StreamLimits{Streams: DefaultMaxStreamsPerPrincipal, Watchers: DefaultMaxWatchersPerPrincipal},
		maxSessionWatches: DefaultMaxSessionWatches,
	}
}

func (c config) validate() error {
	if err := checkCORSOrigins(c.corsOrigins); err != nil {
		return err
	}
	switch {
	case c.dataDir == "":
		return fmt.Errorf("server: WithDataDir: the data directory is empty")
	case c.storeURL != "" && !strings.HasPrefix(c.storeURL, "redis"):
		return fmt.Errorf("server: WithStore(%q): want a redis://, rediss://, redis+sentinel:// or redis+cluster:// URL, or nothing for the embedded store", c.storeURL)
	case c.redisPrefix == "" || strings.ContainsAny(c.redisPrefix, "{}"):
		return fmt.Errorf("server: WithRedisPrefix(%q): must be non-empty and without braces", c.redisPrefix)
	case c.workLease < 100*time.Millisecond:
		return fmt.Errorf("server: WithWorkLease(%s): must be at least 100ms", c.workLease)
	case c.maxValueBytes <= 0:
		return fmt.Errorf("server: WithMaxValueBytes(%d): must be positive", c.maxValueBytes)
	case c.maxTxnOps <= 0 || c.maxTxnBytes <= 0:
		return fmt.Errorf("server: WithTxnLimits(%d, %d): both must be positive", c.maxTxnOps, c.maxTxnBytes)
	case c.maxTextBytes < DefaultMaxTextBytes:
		return fmt.Errorf("server: WithMaxTextBytes(%d): must be at least %d, the length the SDK cuts ACK reasons to", c.maxTextBytes, DefaultMaxTextBytes)
	case c.retainRevisions < 0:
		return fmt.Errorf("server: WithRetention(%d, _): must be 0 (no limit) or positive", c.retainRevisions)
	case c.retainLog < 0:
		return fmt.Errorf("server: WithLogRetention(%d): must be 0 (no limit) or positive", c.retainLog)
	case c.retainFor < 0:
		return fmt.Errorf("server: WithRetention(_, %s): must be 0 (no limit) or positive", c.retainFor)
	case c.quotaBytes < 0:
		return fmt.Errorf("server: WithQuota(%d): must be 0 (no quota) or positive", c.quotaBytes)
	case c.progressInterval <= 0:
		return fmt.Errorf("server: WithProgressInterval(%s): must be positive", c.progressInterval)
	case c.watchRingEvents <= 0:
		return fmt.Errorf("server: WithWatchRing(%d): must be positive", c.watchRingEvents)
	case c.maxWasmBytes <= 0:
		return fmt.Errorf("server: WithMaxValidatorBytes(%d): must be positive", c.maxWasmBytes)
	case c.validatorTimeout <= 0:
		return fmt.Errorf("server: WithValidatorTimeout(%s): must be positive", c.validatorTimeout)
	case c.validatorBudget < c.validatorMemory:
		return fmt.Errorf("server: WithValidatorMemoryBudget(%d): must hold at least one instance of the memory limit (%d bytes)", c.validatorBudget, c.validatorMemory)
	case c.compileTimeout <= 0:
		return fmt.Errorf("server: WithValidatorCompileTimeout(%s): must be positive", c.compileTimeout)
	case c.maxCompiles < 0:
		return fmt.Errorf("server: WithValidatorMaxCompiles(%d): must be positive", c.maxCompiles)
	case c.instanceLease <= 0:
		return fmt.Errorf("server: WithInstanceLease(%s): must be positive", c.instanceLease)
	case c.rolloutCheck <= 0:
		return fmt.Errorf("server: WithRolloutCheckInterval(%s): must be positive", c.rolloutCheck)
	case c.readHeaderTimeout <= 0 || c.readTimeout <= 0 || c.idleTimeout <= 0:
		return fmt.Errorf("server: WithTimeouts(%s, %s, %s): each must be positive", c.readHeaderTimeout, c.readTimeout, c.idleTimeout)
	case c.maxConns < 0 || c.maxConnsPerAddr < 0 || c.reservedConns < 0:
		return fmt.Errorf("server: WithConnLimits(%d, %d, %d): each must be 0 or positive", c.maxConns, c.maxConnsPerAddr, c.reservedConns)
	case c.maxSessionWatches < 0:
		return fmt.Errorf("server: WithMaxSessionWatches(%d): must be 0 (no limit) or positive", c.maxSessionWatches)
	case c.streamLimits.Streams < 0 || c.streamLimits.Watchers < 0:
		return fmt.Errorf("server: WithStreamLimits(%d, %d): each must be 0 (no limit) or positive", c.streamLimits.Streams, c.streamLimits.Watchers)
	case c.now == nil:
		return fmt.Errorf("server: WithClock(nil): give a clock")
	case (c.tlsCert == "") != (c.tlsKey == ""):
		return fmt.Errorf("server: WithTLS: give both a certificate and a key")
	case c.tlsClientCA != "" && c.tlsCert == "":
		return fmt.Errorf("server: WithTLSClientCA(%q): client certificates need TLS; give WithTLS too", c.tlsClientCA)
	case c.tlsClientCA != "" && c.authFile == "":
		return fmt.Errorf("server: WithTLSClientCA(%q): the principals of client certificates and their grants are in the auth file; give WithAuthFile too", c.tlsClientCA)
	case c.metricsAuth && c.authFile == "":
		return fmt.Errorf("server: WithMetricsAuth: /metrics is scraped with a principal of the auth file; give WithAuthFile too")
	}
	if c.otlpEndpoint != "" {
		if err := tracing.CheckEndpoint(c.otlpEndpoint); err != nil {
			return fmt.Errorf("server: WithOTLPEndpoint: %w", err)
		}
	}
	return nil
}

// loadClientCAs reads the client CA file, if one was given.
func (c *config) loadClientCAs() error {
	if c.tlsClientCA == "" {
		return nil
	}
	pem, err := os.ReadFile(c.tlsClientCA)
	if err != nil {
		return fmt.Errorf("server: WithTLSClientCA: %w", err)
	}
	c.clientCAs = x509.NewCertPool()
	if !c.clientCAs.AppendCertsFromPEM(pem) {
		return fmt.Errorf("server: WithTLSClientCA(%q): the file holds no PEM certificate", c.tlsClientCA)
	}
	return nil
}

// WithDataDir sets the directory of the embedded store (default ./pawl-data).
func WithDataDir(dir string) Option { return func(c *config) { c.dataDir = dir } }

// WithStore keeps the data in Redis, at a URL (redis://host:port/db,
// rediss://..., redis+sentinel://h1:p1,h2:p2/master[/db] or
// redis+cluster://h1:p1,h2:p2), instead of the embedded store in the data
// directory: several servers given the same URL and prefix are replicas
// that serve the same revisions. The data directory still holds the
// validator compilation cache.
func WithStore(url string) Option { return func(c *config) { c.storeURL = url } }

// WithRedisPrefix sets the prefix of the store's keys in Redis (default
// DefaultRedisPrefix): one Redis can hold several stores.
func WithRedisPrefix(prefix string) Option { return func(c *config) { c.redisPrefix = prefix } }

// WithRedisReplicaAcks makes every write to a Redis store wait until n
// replicas have it, for at most wait, before it is acknowledged: a
// failover can then not lose it. Default 0: Redis replication is
// asynchronous, and a failover may lose the last writes.
func WithRedisReplicaAcks(n int, wait time.Duration) Option {
	return func(c *config) { c.redisOpts = append(c.redisOpts, redisstore.WithReplicaAcks(n, wait)) }
}

// WithRedisAcceptRollback accepts, at start, a rollback of the Redis store
// that a replica found (Redis restarted from an older snapshot, lost the
// tail of its append-only file, failed over without the last writes, or
// holds another data set): writes are refused until one replica starts
// with it. The store then continues from what Redis holds, its revision
// counter past every revision a replica reported handing out, and every
// watcher takes a snapshot. It is logged and audited. Without a recorded
// rollback it does nothing.
func WithRedisAcceptRollback() Option {
	return func(c *config) { c.redisOpts = append(c.redisOpts, redisstore.WithAcceptRollback()) }
}

// WithRedisWaitAOF makes every write to a Redis store wait, for at most
// wait, until Redis fsynced it to its append-only file (WAITAOF, Redis 7.2
// or later; with WithRedisReplicaAcks, on that many replicas too): under
// appendfsync everysec, a crash of the Redis host can then not lose it.
// New fails when Redis has no WAITAOF or keeps no append-only file.
func WithRedisWaitAOF(wait time.Duration) Option {
	return func(c *config) { c.redisOpts = append(c.redisOpts, redisstore.WithWaitAOF(wait)) }
}

// WithWorkLease sets how long a replica's lease on work that must happen
// once lasts (default DefaultWorkLease); it is renewed every third of it.
func WithWorkLease(d time.Duration) Option { return func(c *config) { c.workLease = d } }

// WithTxnLimits bounds one transaction (KVService.Txn): at most ops
// changes, with keys and values of at most bytes in all (defaults
// DefaultMaxTxnOps and DefaultMaxTxnBytes).
func WithTxnLimits(ops, bytes int) Option {
	return func(c *config) { c.maxTxnOps, c.maxTxnBytes = ops, bytes }
}

// WithMaxValueBytes sets the largest value a Put accepts (default 1 MiB).
func WithMaxValueBytes(n int) Option { return func(c *config) { c.maxValueBytes = n } }

// WithMaxTextBytes bounds every string of every request, in bytes
// (default and least DefaultMaxTextBytes): longer ones are refused with
// InvalidArgument naming the field. Keys have their own bound
// (store.MaxKeyBytes).
func WithMaxTextBytes(n int) Option { return func(c *config) { c.maxTextBytes = n } }

// WithRetention sets how much of the change log is kept: at most revisions
// revisions and none older than age (0 disables either limit). Watchers and
// reads at older revisions are told the revision was compacted. The
// revisions that only record instances' reports (ACKs, applied records,
// evidence) do not count toward revisions; WithLogRetention bounds them.
func WithRetention(revisions int64, age time.Duration) Option {
	return func(c *config) { c.retainRevisions, c.retainFor = revisions, age }
}

// WithLogRetention sets how many revisions of any kind, instances' reports
// included, the change log keeps at most (default 1,000,000; 0: no limit).
func WithLogRetention(revisions int64) Option {
	return func(c *config) { c.retainLog = revisions }
}

// WithQuota sets the storage quota, in bytes (default DefaultQuotaBytes;
// 0: none), as etcd's --quota-backend-bytes: a write that would take the
// store past it is refused with ResourceExhausted and raises the NOSPACE
// alarm, which Server.StorageUsage and the Status RPC report; reads,
// deletes and compaction still work, and the alarm clears by itself once
// they take the store under nine tenths of the quota. A fleet's reports
// and the rollout's own records may go a tenth of the quota past it.
// Replicas of a Redis store should be given the same quota.
func WithQuota(bytes int64) Option { return func(c *config) { c.quotaBytes = bytes } }

// withQuotaCheck sets how often the server reads the usage to log the
// alarm; tests reach it through export_test.go.
func withQuotaCheck(d time.Duration) Option { return func(c *config) { c.quotaCheck = d } }

// WithProgressInterval sets how often idle watch streams get a progress
// notification (default 10s).
func WithProgressInterval(d time.Duration) Option { return func(c *config) { c.progressInterval = d } }

// WithWatchRing sets how many recent events the watch hub keeps in memory;
// a watcher further behind reads the change log.
func WithWatchRing(events int) Option { return func(c *config) { c.watchRingEvents = events } }

// WithShutdownTimeout bounds how long Serve waits for in-flight requests
// after its context ends (default 10s); then it closes the connections
// left.
func WithShutdownTimeout(d time.Duration) Option { return func(c *config) { c.shutdownTimeout = d } }

// WithTLS makes Serve use TLS with the PEM certificate and key files.
func WithTLS(certFile, keyFile string) Option {
	return func(c *config) { c.tlsCert, c.tlsKey = certFile, keyFile }
}

// WithAuthFile makes the server authenticate every call with the bearer
// tokens and certificate principals of the auth file at path (see
// docs/AUTH.md), and authorize it by their grants, denying by default.
// Server.ReloadAuth reads the file again. Without it the server is open:
// every caller is "anonymous" and may do everything.
func WithAuthFile(path string) Option { return func(c *config) { c.authFile = path } }

// WithTLSClientCA makes Serve ask clients for a certificate and verify one
// that is presented against the PEM CA certificates in the file; the
// certificate's URI SAN (a SPIFFE ID), else its subject, is its principal
// in the auth file's certificates section. It needs WithTLS and
// WithAuthFile.
func WithTLSClientCA(file string) Option { return func(c *config) { c.tlsClientCA = file } }

// WithTimeouts sets how long a client has to send a request's headers
// (default DefaultReadHeaderTimeout) and then its body (default
// DefaultReadTimeout; a stream lives on once its request arrived), and
// how long a connection may stay idle, with no request and no stream,
// before the server closes it (default DefaultIdleTimeout).
func WithTimeouts(readHeader, read, idle time.Duration) Option {
	return func(c *config) { c.readHeaderTimeout, c.readTimeout, c.idleTimeout = readHeader, read, idle }
}

// WithConnLimits bounds the connections Serve accepts: total at once (0:
// the process's limit of open files, RLIMIT_NOFILE, less what the server
// keeps for its own files and less reserved), perAddress from one remote
// address outside the admin networks (0: no limit but the total; default
// DefaultMaxConnsPerAddress), and reserved more beyond the total that only
// the admin networks may open (default DefaultReservedConns). A connection
// over a limit is closed at once, and logged.
func WithConnLimits(total, perAddress, reserved int) Option {
	return func(c *config) { c.maxConns, c.maxConnsPerAddr, c.reservedConns = total, perAddress, reserved }
}

// WithAdminNetworks sets the networks whose connections may use the
// reserve of WithConnLimits and have no per-address limit (default
// DefaultAdminNetworks, loopback; none when empty). Behind a proxy on the
// same host every connection comes from loopback: give the operator's
// networks instead.
func WithAdminNetworks(networks ...netip.Prefix) Option {
	return func(c *config) { c.adminNetworks = networks }
}

// WithStreamLimits bounds how many streams of any kind (watches,
// downloads, snapshots), and how many watch streams among them, one
// principal may hold open at once; without an auth file, one remote
// address (0: no limit; defaults DefaultMaxStreamsPerPrincipal and
// DefaultMaxWatchersPerPrincipal). The stream over a limit fails with
// ResourceExhausted. Admins of the auth file are exempt.
func WithStreamLimits(streams, watchers int) Option {
	return func(c *config) { c.streamLimits = api.StreamLimits{Streams: streams, Watchers: watchers} }
}

// WithMaxSessionWatches bounds how many watches one session
// (SessionService.Session) may hold open at once (0: no limit; default
// DefaultMaxSessionWatches). A watch over it is refused, in the session,
// with resource_exhausted; the session goes on.
func WithMaxSessionWatches(n int) Option { return func(c *config) { c.maxSessionWatches = n } }

// WithMetricsAuth makes /metrics answer only a request with a bearer
// token or client certificate of the auth file (any principal; a scraper
// needs no grant), and 401 any other. It needs WithAuthFile. Without it,
// /metrics is open, as etcd's and Consul's are: its series name
// procedures, codes and limits, never keys, configs or principals.
// /healthz and /readyz are always open.
func WithMetricsAuth() Option { return func(c *config) { c.metricsAuth = true } }

// WithOTLPEndpoint makes the server trace every call and export the
// spans over OTLP/gRPC to the collector at url: http://host:4317
// (plaintext) or https://host:4317 (TLS). An ACK's span continues the
// trace context the SDK sent with it. Default: no tracing.
func WithOTLPEndpoint(url string) Option { return func(c *config) { c.otlpEndpoint = url } }

// WithLogger sets the structured logger (default slog.Default()).
func WithLogger(log *slog.Logger) Option { return func(c *config) { c.log = log } }

// WithMaxValidatorBytes sets the largest validator module Upload accepts
// (default 16 MiB).
func WithMaxValidatorBytes(n int) Option { return func(c *config) { c.maxWasmBytes = n } }

// WithValidatorCacheDir sets where compiled validators are cached (default
// wasm-cache under the data directory), so a restart does not recompile.
func WithValidatorCacheDir(dir string) Option { return func(c *config) { c.wasmCacheDir = dir } }

// WithValidatorTimeout bounds one validation (default 1s).
func WithValidatorTimeout(d time.Duration) Option { return func(c *config) { c.validatorTimeout = d } }

// WithValidatorMemoryLimit bounds each validator instance's memory, in bytes
// (a multiple of 64 KiB; default 64 MiB).
func WithValidatorMemoryLimit(n int) Option { return func(c *config) { c.validatorMemory = n } }

// WithValidatorMemoryBudget bounds the memory of all validator instances
// together, in bytes (default 1 GiB): at most budget / memory limit
// instances exist at once, and a validation that gets none within its time
// limit fails with ResourceExhausted.
func WithValidatorMemoryBudget(n int) Option { return func(c *config) { c.validatorBudget = n } }

// WithValidatorModuleLimits bounds the shape of the validator modules
// Upload accepts, checked before compiling (default
// DefaultValidatorModuleLimits).
func WithValidatorModuleLimits(l host.ModuleLimits) Option {
	return func(c *config) { c.validatorLimits = l }
}

// WithValidatorCompileProcess compiles each validator in a child process,
// argv plus the arguments host.RunCompileProcess takes, so that the compile
// timeout, a cancelled upload and Close stop it at once
// (host.WithCompileProcess; Linux). pawld passes itself.
func WithValidatorCompileProcess(argv ...string) Option {
	return func(c *config) { c.compileProcess = argv }
}

// WithValidatorCompileTimeout bounds one validator's compilation (default
// 2 minutes).
func WithValidatorCompileTimeout(d time.Duration) Option {
	return func(c *config) { c.compileTimeout = d }
}

// WithValidatorMaxCompiles sets how many validators may compile at once
// (default, or 0: half of GOMAXPROCS, at least 1).
func WithValidatorMaxCompiles(n int) Option { return func(c *config) { c.maxCompiles = n } }

// WithInstanceLease sets how long a registration or heartbeat keeps an
// instance live (default 30s).
func WithInstanceLease(d time.Duration) Option { return func(c *config) { c.instanceLease = d } }

// WithRolloutCheckInterval sets how often the server compares the earliest
// rollout deadline with its clock again (default 1s). A timer wakes the
// server at each deadline; the interval matters for a clock that does not
// follow wall time (WithClock in tests).
func WithRolloutCheckInterval(d time.Duration) Option { return func(c *config) { c.rolloutCheck = d } }

// WithClock replaces time.Now for leases, release times, health windows,
// deadlines and receipts: tests and simulations move time by hand instead
// of waiting. The change log's age retention keeps the real clock.
func WithClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// withStoreWrapper wraps the store every part of the server uses; tests
// reach it through export_test.go.
func withStoreWrapper(wrap func(store.Store) store.Store) Option {
	return func(c *config) { c.wrapStore = wrap }
}

// withAuditWrapper wraps the audit log; tests reach it through
// export_test.go.
func withAuditWrapper(wrap func(audit.Log) audit.Log) Option {
	return func(c *config) { c.wrapAudit = wrap }
}
