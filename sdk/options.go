package sdk

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/pawlcfg/pawl/sdk/configid"
	"github.com/pawlcfg/pawl/sdk/credentials"
	"github.com/pawlcfg/pawl/validators/host"
)

// Option configures New.
type Option func(*config)

// HealthCheck is the application's view of its own health while a newly
// applied config is on trial: it is called right after the swap, every
// health interval (WithHealthInterval) through the release's health
// window and once at its end, and then, while the release is a canary
// whose rollout can still stop (not yet promoted, stopped or replaced),
// every health interval. Its first error makes the instance report the
// release unhealthy at once (without waiting for the window's end), with
// the error as the reason.
type HealthCheck func(ctx context.Context, s *Snapshot) error

// Applier puts a verified, validated snapshot into effect outside the
// process, before the SDK swaps it in (the file agent writes a file). An
// error rejects the release on this instance, with the error as the
// reason, and nothing is swapped.
type Applier func(ctx context.Context, s *Snapshot) error

type config struct {
	instance       Instance
	httpClient     *http.Client
	tlsConfig      *tls.Config
	token          string
	tokenFile      string
	tlsFiles       credentials.TLSFiles
	cacheDir       string
	compiledDir    string
	validatorLimit time.Duration
	tracerProvider trace.TracerProvider
	meterProvider  metric.MeterProvider
	log            *slog.Logger
	healthCheck    HealthCheck
	applier        Applier
	configs        map[string]bool
	assignments    bool
	appArtifact    string
	pinWait        time.Duration
	retain         int
	backoffMin     time.Duration
	backoffMax     time.Duration
	healthInterval time.Duration
	grpc           bool
	noSession      bool
	sessionStart   time.Duration
	sessionRetry   time.Duration
	// downloadAttempts bounds the downloads of one assignment that do
	// not match it (WithDownloadAttempts).
	downloadAttempts int
}

// follows reports whether the client follows config id: every one
// without WithConfigs.
func (c *config) follows(id string) bool { return c.configs == nil || c.configs[id] }

// Defaults of the options.
const (
	// DefaultPinWait is how long a request pinned to a generation this
	// instance does not have waits for it before it is refused.
	DefaultPinWait = 2 * time.Second
	// DefaultRetainGenerations is how many applied generations of each
	// config stay in memory for pinned requests.
	DefaultRetainGenerations = 4
	// DefaultBackoffMin and DefaultBackoffMax bound the wait between
	// reconnects and retries (exponential, with full jitter).
	DefaultBackoffMin = 100 * time.Millisecond
	DefaultBackoffMax = 10 * time.Second
	// DefaultHealthInterval is how often a canary's health is checked
	// again after its health window, while its rollout can still stop.
	DefaultHealthInterval = 10 * time.Second
	// DefaultDownloadAttempts is how many times one assignment is
	// downloaded when what arrives does not hash to what the assignment
	// names, before it is rejected: a corruption on the way (a flaky
	// proxy, a flipped bit) is gone by the second or third try, while a
	// server or cache that keeps sending the wrong bytes is rejected
	// within seconds (the waits between tries follow WithBackoff).
	DefaultDownloadAttempts = 5
	// DefaultSessionStart is how long the server may take to answer a
	// session's hello before the client treats it as a server without
	// sessions and uses its unary calls: pawld answers in milliseconds,
	// and a way that cannot carry a bidirectional stream (an HTTP/1.1
	// proxy holding the request until its body ends) never answers. Long
	// enough for a server under a reconnecting fleet's load.
	DefaultSessionStart = 30 * time.Second
	// DefaultSessionRetry is how long the client follows a server by its
	// unary calls, after the server had no session for it, before it asks
	// that server for a session again: a pawld upgraded under a running
	// client, or one too busy to answer a hello in time, gets the
	// client's session back within this long.
	DefaultSessionRetry = 10 * time.Minute
)

func defaultConfig() config {
	return config{
		instance:       Instance{TrafficWeight: 1},
		tracerProvider: noop.NewTracerProvider(),
		log:            slog.Default(),
		assignments:    true,
		pinWait:        DefaultPinWait,
		retain:         DefaultRetainGenerations,
		validatorLimit: host.DefaultTimeout,
		backoffMin:     DefaultBackoffMin,
		backoffMax:     DefaultBackoffMax,
		healthInterval: DefaultHealthInterval,
		sessionStart:   DefaultSessionStart,
		sessionRetry:   DefaultSessionRetry,

		downloadAttempts: DefaultDownloadAttempts,
	}
}

func (c *config) validate() error {
	var errs []error
	if c.assignments && c.instance.WorkloadIdentity == "" {
		errs = append(errs, errors.New("WithWorkloadIdentity: an instance that follows assignments needs a workload identity"))
	}
	if c.instance.TrafficWeight < 0 {
		errs = append(errs, fmt.Errorf("WithTrafficWeight(%v): must not be negative", c.instance.TrafficWeight))
	}
	if c.pinWait < 0 {
		errs = append(errs, fmt.Errorf("WithPinWait(%s): must not be negative", c.pinWait))
	}
	if c.validatorLimit <= 0 {
		errs = append(errs, fmt.Errorf("WithValidatorTimeout(%s): must be positive", c.validatorLimit))
	}
	if c.retain < 1 {
		errs = append(errs, fmt.Errorf("WithRetainGenerations(%d): must be at least 1", c.retain))
	}
	if c.backoffMin <= 0 || c.backoffMax < c.backoffMin {
		errs = append(errs, fmt.Errorf("WithBackoff(%s, %s): need 0 < min <= max", c.backoffMin, c.backoffMax))
	}
	if c.healthInterval <= 0 {
		errs = append(errs, fmt.Errorf("WithHealthInterval(%s): must be positive", c.healthInterval))
	}
	if c.downloadAttempts < 1 {
		errs = append(errs, fmt.Errorf("WithDownloadAttempts(%d): must be at least 1", c.downloadAttempts))
	}
	for id := range c.configs {
		if err := configid.Check(id); err != nil {
			errs = append(errs, fmt.Errorf("WithConfigs: %w", err))
		}
	}
	if c.httpClient != nil && c.tlsConfig != nil {
		errs = append(errs, errors.New("WithTLSConfig and WithHTTPClient: configure TLS in the HTTP client you pass"))
	}
	if c.httpClient != nil && c.tlsFiles != (credentials.TLSFiles{}) {
		errs = append(errs, errors.New("WithCAFile or WithClientCertificate, and WithHTTPClient: configure TLS in the HTTP client you pass"))
	}
	if c.token != "" && c.tokenFile != "" {
		errs = append(errs, errors.New("WithAuthToken and WithAuthTokenFile: give the token one way"))
	}
	if (c.tlsFiles.Cert == "") != (c.tlsFiles.Key == "") {
		errs = append(errs, fmt.Errorf("WithClientCertificate(%q, %q): give both the certificate and the key file", c.tlsFiles.Cert, c.tlsFiles.Key))
	}
	if c.tracerProvider == nil {
		errs = append(errs, errors.New("WithTracerProvider(nil): pass a provider, or leave the option out for none"))
	}
	if c.log == nil {
		errs = append(errs, errors.New("WithLogger(nil): pass a logger, or leave the option out for slog.Default()"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("sdk: %w", errors.Join(errs...))
	}
	return nil
}

// Instance describes this process to the server: who it is, where it runs
// and what it runs, which stage selectors and quorum policies match.
type Instance struct {
	// WorkloadIdentity is unique per instance and stable across restarts
	// (a pod name, a host and port).
	WorkloadIdentity string
	// Zone is the fault domain.
	Zone string
	// Role is the instance's role, for critical-role policies.
	Role string
	// TrafficWeight is the share of traffic the instance serves (default 1).
	TrafficWeight float64
	// AppVersion is the application's version (dotted numbers): releases
	// with a higher minimum leave this instance out.
	AppVersion string
	// Labels are matched by release and stage selectors.
	Labels map[string]string
}

// WithWorkloadIdentity sets the instance's workload identity (required
// when following assignments).
func WithWorkloadIdentity(id string) Option {
	return func(c *config) { c.instance.WorkloadIdentity = id }
}

// WithZone sets the instance's fault domain.
func WithZone(zone string) Option { return func(c *config) { c.instance.Zone = zone } }

// WithRole sets the instance's role.
func WithRole(role string) Option { return func(c *config) { c.instance.Role = role } }

// WithTrafficWeight sets the share of traffic the instance serves.
func WithTrafficWeight(w float64) Option { return func(c *config) { c.instance.TrafficWeight = w } }

// WithAppVersion sets the application's version, compared with releases'
// minimum app version.
func WithAppVersion(v string) Option { return func(c *config) { c.instance.AppVersion = v } }

// WithLabels sets the instance's labels (copied).
func WithLabels(labels map[string]string) Option {
	return func(c *config) {
		c.instance.Labels = make(map[string]string, len(labels))
		for k, v := range labels {
			c.instance.Labels[k] = v
		}
	}
}

// WithAppArtifact names the application build in every ACK (an image
// digest, a version control revision).
func WithAppArtifact(artifact string) Option { return func(c *config) { c.appArtifact = artifact } }

// WithHTTPClient sets the HTTP client for every call. The default speaks
// HTTP/2 (over TLS for https URLs, with prior knowledge for http URLs) and
// pings idle connections so that a dead server is noticed.
func WithHTTPClient(client *http.Client) Option { return func(c *config) { c.httpClient = client } }

// WithTLSConfig sets the TLS configuration of the default HTTP client.
func WithTLSConfig(cfg *tls.Config) Option { return func(c *config) { c.tlsConfig = cfg } }

// WithAuthToken sends token as a bearer token (Authorization header) on
// every call. A token never travels in clear text beyond this machine: New
// fails, before any connection, when a server URL is http:// and its host
// is not loopback (127.0.0.0/8, ::1 or "localhost").
func WithAuthToken(token string) Option { return func(c *config) { c.token = token } }

// WithAuthTokenFile sends the token in the file at path (surrounding white
// space removed) as a bearer token on every call, as WithAuthToken does.
// The file is read again when it changes, so a rotated token (a mounted
// secret replaced) is used from the next call on without a restart; while
// it cannot be read, or is empty, the last token read is sent and a
// warning logged. New fails when the file cannot be read at all.
func WithAuthTokenFile(path string) Option { return func(c *config) { c.tokenFile = path } }

// WithCAFile trusts the CA certificates in the PEM file at path, instead
// of the system's roots, to sign the server's certificate (https URLs).
func WithCAFile(path string) Option { return func(c *config) { c.tlsFiles.CA = path } }

// WithClientCertificate presents the certificate (PEM, with its chain) and
// private key in these files for mutual TLS; pawld takes the certificate's
// SPIFFE ID (URI SAN), or else its subject, as the caller's principal. The
// files are read again at a new connection when they changed, so a rotated
// certificate is used without a restart. It combines with WithTLSConfig
// when that sets no client certificate of its own.
func WithClientCertificate(certFile, keyFile string) Option {
	return func(c *config) { c.tlsFiles.Cert, c.tlsFiles.Key = certFile, keyFile }
}

// WithoutSession makes the client use the unary calls and streams of
// the older servers (Register, WatchAssignments, RolloutService.Ack,
// KVService.Watch) instead of one session stream, even where the server
// has sessions: for comparisons, and for a way to the server that cannot
// carry a bidirectional HTTP/2 stream. By default the client opens a
// session, and falls back to those calls by itself against a server that
// has none.
func WithoutSession() Option { return func(c *config) { c.noSession = true } }

// WithGRPC speaks the gRPC protocol instead of Connect (both work with
// pawld; gRPC needs HTTP/2).
func WithGRPC() Option { return func(c *config) { c.grpc = true } }

// WithCacheDir keeps the last known good state in dir: verified releases,
// validator modules and their compiled code, and space snapshots, so that
// a process that starts while the server is down starts from them, and a
// restart does not compile validators again. New creates dir if needed
// and sets its mode to 0700; files are written 0600. Keep it apart from
// anything the application or other users can write: a cached release is
// served at start only after its validator (verified by sha256) accepts it
// again, and, once the server answers, only if it has the digests the
// assignment names, but a rewrite that passes its validator is served
// until then.
func WithCacheDir(dir string) Option { return func(c *config) { c.cacheDir = dir } }

// WithDownloadAttempts sets how many times one assignment is downloaded
// when what arrives does not hash to the digests the assignment names
// (default DefaultDownloadAttempts), waiting with backoff between tries;
// after the last, the release is REJECTED with the mismatch as the reason.
// A release the session sent with the assignment is not counted: when it
// does not match, the release is downloaded as often as this says.
func WithDownloadAttempts(n int) Option { return func(c *config) { c.downloadAttempts = n } }

// WithCompiledCacheDir keeps validators' compiled code in dir rather than
// in the cache directory's compiled/ folder: processes of one user on a
// host can share it, so each module is compiled once per host. New refuses
// a directory another user could write (host.ErrUnsafeCacheDir).
func WithCompiledCacheDir(dir string) Option { return func(c *config) { c.compiledDir = dir } }

// WithValidatorTimeout bounds each local validation in wall-clock time
// (default 1s, as on the server). A validation that runs longer is
// stopped and run again, up to three times in all (a busy machine can
// starve one run); when the last is stopped too, the release is
// REJECTED. Give a slow or busy instance that validates large configs
// more.
func WithValidatorTimeout(d time.Duration) Option { return func(c *config) { c.validatorLimit = d } }

// WithTracerProvider sets where the spans of each apply step go; their
// trace context travels in the ACKs. Default: no tracing.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tracerProvider = tp }
}

// WithMeterProvider sets where the client's metrics go (OpenTelemetry):
// applies, rejects, ACKs sent and failed, seconds stale and each config's
// generation; the instruments are listed with MetricApplies. Default: no
// metrics.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.meterProvider = mp }
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(log *slog.Logger) Option { return func(c *config) { c.log = log } }

// WithHealthCheck sets the application's health check, run during each
// release's health window and, for a canary, after it (see HealthCheck).
func WithHealthCheck(check HealthCheck) Option { return func(c *config) { c.healthCheck = check } }

// WithHealthInterval sets how often the health check is polled through a
// release's health window, and how often a canary whose health window
// passed is checked again while its rollout can still stop (default
// DefaultHealthInterval): the health check runs, and when its stage has a
// health budget, the error rate and p99 the middleware and interceptor
// measured over the last health window (or interval, if longer) are
// judged against it. The first failure is reported at once.
func WithHealthInterval(d time.Duration) Option { return func(c *config) { c.healthInterval = d } }

// WithApplier sets a step that puts each snapshot into effect outside the
// process before it is swapped in.
func WithApplier(apply Applier) Option { return func(c *config) { c.applier = apply } }

// WithConfigs limits the client to these configs; assignments of others
// are ignored. Default: every config assigned to the instance.
func WithConfigs(ids ...string) Option {
	return func(c *config) {
		c.configs = make(map[string]bool, len(ids))
		for _, id := range ids {
			c.configs[id] = true
		}
	}
}

// WithoutAssignments makes a client that only follows key spaces: it does
// not register and receives no releases.
func WithoutAssignments() Option { return func(c *config) { c.assignments = false } }

// WithPinWait sets how long a request pinned to a generation this instance
// does not have waits before it is refused (default DefaultPinWait).
func WithPinWait(d time.Duration) Option { return func(c *config) { c.pinWait = d } }

// WithRetainGenerations sets how many applied generations of each config
// stay available to pinned requests (default DefaultRetainGenerations).
func WithRetainGenerations(n int) Option { return func(c *config) { c.retain = n } }

// WithBackoff bounds the wait between reconnects and retries.
func WithBackoff(min, max time.Duration) Option {
	return func(c *config) { c.backoffMin, c.backoffMax = min, max }
}

// tokenSource returns where the bearer token comes from, or nil for no
// token. A token file is read now.
func (c *config) tokenSource() (credentials.TokenSource, error) {
	switch {
	case c.tokenFile != "":
		f, err := credentials.NewTokenFile(c.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("sdk: WithAuthTokenFile(%q): %w", c.tokenFile, err)
		}
		return &loggedToken{src: f, log: c.log, path: c.tokenFile}, nil
	case c.token != "":
		return credentials.StaticToken(c.token), nil
	}
	return nil, nil
}

// loggedToken logs a token file that cannot be read, once per distinct
// error, while its last token is still sent.
type loggedToken struct {
	src  credentials.TokenSource
	log  *slog.Logger
	path string

	mu   sync.Mutex
	last string // the last error logged
}

func (l *loggedToken) Token() (string, error) {
	token, err := l.src.Token()
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	l.mu.Lock()
	changed := msg != l.last
	l.last = msg
	l.mu.Unlock()
	if changed && err != nil {
		l.log.Warn("pawl: the token file cannot be read; the last token read is sent", "file", l.path, "err", err)
	}
	return token, err
}
