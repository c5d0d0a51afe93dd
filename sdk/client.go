package sdk

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/otelconnect"
	"go.opentelemetry.io/otel/trace"

	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/sdk/credentials"
)

// Client is one instance's connection to Pawl: it registers, follows the
// instance's assignments, applies what it is assigned after verifying and
// validating it, reports ACKs, and serves the applied snapshots to the
// application. Its methods are safe for concurrent use. Close stops every
// goroutine it started.
type Client struct {
	cfg      config
	url      string
	servers  *servers
	bootID   string
	http     *http.Client
	ownsHTTP bool

	instances  pawlv1connect.InstanceServiceClient
	releases   pawlv1connect.ReleaseServiceClient
	validators pawlv1connect.ValidatorServiceClient
	rollouts   pawlv1connect.RolloutServiceClient
	kv         pawlv1connect.KVServiceClient
	// sess is the session (nil: the client uses the unary calls only).
	sess *session
	// reports numbers the ACKs of this boot (Ack.report_id).
	reports atomic.Uint64

	tracer  trace.Tracer
	started time.Time
	conn    connState
	metrics *metrics
	runtime *sharedRuntime
	cache   *diskCache
	health  *healthRecorder
	// inline holds the releases the session sent with the assignments.
	inline *inlineReleases

	// current is every config's applied snapshot: an immutable map,
	// replaced on every swap, read without locks.
	current atomic.Pointer[map[string]*Snapshot]
	// epoch is the membership epoch of this boot's registration (0 until
	// registered); seq numbers the applies of this boot.
	epoch atomic.Int64
	seq   atomic.Int64
	// ran is, per config, the last apply of this boot whose APPLIED the
	// server took (see reporter.movedPast); guarded by ranMu, which is
	// taken alone.
	ranMu sync.Mutex
	ran   map[string]ranApply

	// mu guards what follows, and every write of current.
	mu sync.Mutex
	// retained holds each config's recent snapshots, newest last.
	retained map[string][]*Snapshot
	// changed is closed, and replaced, whenever a snapshot is swapped in.
	changed chan struct{}
	subs    map[int]*subscriber
	nextSub int
	// notes carries swaps to the subscribers' goroutine (see notify.go).
	notes *notifier
	// link tracks the connection to the server, for Status and the logs.
	link linkState
	// assigned holds the configs the server assigned to this instance.
	assigned map[string]bool
	// trials holds each config's canary on trial, if any.
	trials map[string]*trial
	closed bool

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New connects to the Pawl server at serverURL (http://host:port or
// https://host:port) and starts following the instance's assignments.
// serverURL may list several servers separated by commas (replicas that
// share one store): the client uses one at a time, moves on to the next
// when it cannot reach it or it says it cannot follow the store, and
// resumes there from the revisions it has, missing nothing. It
// does not wait for the server: with a cache directory, the last known
// good snapshots are available as soon as New returns, verified by digest
// and validated again by their validators (a cached release that fails is
// not served); Wait blocks until a config has one. ctx bounds only the
// setup (reading the cache and validating it, starting the validator
// runtime); Close stops the client.
func New(ctx context.Context, serverURL string, opts ...Option) (*Client, error) {
	cfg := defaultConfig()
	for _, opt := range opts {
		opt(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	urls, err := parseServers(serverURL)
	if err != nil {
		return nil, err
	}
	token, err := cfg.tokenSource()
	if err != nil {
		return nil, err
	}
	if token != nil {
		for _, u := range urls {
			if err := credentials.RefuseClearText(u.String()); err != nil {
				return nil, fmt.Errorf("sdk: %w", err)
			}
		}
	}
	tlsConfig, err := cfg.tlsFiles.Config(cfg.tlsConfig)
	if err != nil {
		return nil, fmt.Errorf("sdk: %w", err)
	}
	c := &Client{
		cfg: cfg, url: urls[0].String(), bootID: newBootID(), started: time.Now(), metrics: &metrics{}, inline: newInlineReleases(cfg.follows),
		tracer:   cfg.tracerProvider.Tracer("github.com/pawlcfg/pawl/sdk"),
		health:   newHealthRecorder(),
		retained: map[string][]*Snapshot{}, changed: make(chan struct{}), subs: map[int]*subscriber{}, notes: newNotifier(), assigned: map[string]bool{},
		trials: map[string]*trial{},
	}
	empty := map[string]*Snapshot{}
	c.current.Store(&empty)
	c.http = cfg.httpClient
	if c.http == nil {
		c.http, c.ownsHTTP = defaultHTTPClient(tlsConfig), true
	}
	// The bearer transport goes under the server list's, so that it sees,
	// and checks, the server each request really goes to.
	next := c.http.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	next = lossTransport{next}
	if token != nil {
		next = credentials.Bearer(next, token)
	}
	if len(urls) > 1 {
		c.servers = &servers{urls: urls, base: urls[0].Path, next: next}
		next = c.servers
	}
	if next != c.http.Transport {
		wrapped := *c.http
		wrapped.Transport = next
		c.http = &wrapped
	}
	otelInterceptor, err := otelconnect.NewInterceptor(otelconnect.WithTracerProvider(cfg.tracerProvider), otelconnect.WithoutMetrics())
	if err != nil {
		return nil, fmt.Errorf("sdk: tracing interceptor: %w", err)
	}
	clientOpts := []connect.ClientOption{connect.WithInterceptors(otelInterceptor)}
	if c.servers != nil {
		clientOpts = append(clientOpts, connect.WithInterceptors(c.servers.interceptor()))
	}
	clientOpts = append(clientOpts, connect.WithInterceptors(lossInterceptor{}))
	if cfg.grpc {
		clientOpts = append(clientOpts, connect.WithGRPC())
	}
	c.instances = pawlv1connect.NewInstanceServiceClient(c.http, c.url, clientOpts...)
	c.releases = pawlv1connect.NewReleaseServiceClient(c.http, c.url, clientOpts...)
	c.validators = pawlv1connect.NewValidatorServiceClient(c.http, c.url, clientOpts...)
	c.rollouts = pawlv1connect.NewRolloutServiceClient(c.http, c.url, clientOpts...)
	c.kv = pawlv1connect.NewKVServiceClient(c.http, c.url, clientOpts...)
	c.sess = newSession(c, c.http, c.url, len(urls), clientOpts)

	compiled := cfg.compiledDir
	if cfg.cacheDir != "" {
		if c.cache, err = openDiskCache(cfg.cacheDir); err != nil {
			return nil, err
		}
		if compiled == "" {
			compiled = c.cache.compiledDir()
		}
	}
	if c.runtime, err = acquireRuntime(ctx, compiled, cfg.validatorLimit); err != nil {
		if c.cache != nil {
			_ = c.cache.close()
		}
		return nil, err
	}
	if c.cache != nil && cfg.assignments {
		for _, a := range c.cache.loadApplied(cfg.log) {
			if !cfg.follows(a.release.Config) {
				continue
			}
			if err := c.revalidate(ctx, a); err != nil {
				continue
			}
			c.swap(context.Background(), a.snapshot())
		}
	}
	if c.metrics, err = newMetrics(c, cfg.meterProvider); err != nil {
		cfg.log.Warn("pawl: the client records no metrics", "error", err)
		c.metrics = &metrics{}
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	if cfg.assignments {
		c.wg.Add(1)
		go c.follow()
	}
	return c, nil
}

// revalidate runs a cached release's validator on it again before it is
// served: the cache is not its own authority (see diskCache). A release
// the validator refuses, or whose validator cannot be loaded, is dropped
// from the cache; one whose validation did not finish (the limit, ctx)
// stays for the next start. Either way it is not served, and the config
// has no snapshot until the server's assignment is applied.
func (c *Client) revalidate(ctx context.Context, a cachedApply) error {
	f := fetched{release: a.release, module: a.module}
	err := c.validate(ctx, &f)
	f.let()
	if err == nil {
		return nil
	}
	dropped := errors.Is(err, errInvalidContent) || errors.Is(err, errUnloadable)
	if dropped {
		c.cache.dropRelease(a.release.Config, a.release.Generation)
	}
	c.cfg.log.Warn("pawl: a cached release failed validation and is not served; the config waits for the server",
		"config", a.release.Config, "generation", a.release.Generation, "dropped", dropped, "error", err)
	return err
}

// Close stops every goroutine the client and its spaces started, waits for
// them, and releases the validator runtime. In-flight applies are
// abandoned before their next step; callbacks not yet made are dropped,
// and every channel of Changes and Watch is closed. Close is idempotent,
// and may be called from an OnChange callback (it then does not wait for
// that callback to return).
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
	c.notes.close()
	c.metrics.close()
	err := releaseRuntime(context.Background(), c.runtime)
	if c.cache != nil {
		if cerr := c.cache.close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	if c.ownsHTTP {
		c.http.CloseIdleConnections()
	}
	return err
}

// Server returns the URL of the server the client uses now: the one it
// was given, or, given several, the one it moved to last.
func (c *Client) Server() string {
	if c.servers == nil {
		return c.url
	}
	return c.servers.current()
}

// moveOn makes a client given several servers use the next one from its
// next call on: the current one said it cannot follow the store.
func (c *Client) moveOn() {
	if c.servers != nil {
		c.servers.moveOn(c.servers.cur.Load())
		c.sess.moved()
	}
}

// BootID is this process's boot ID: new for every Client.
func (c *Client) BootID() string { return c.bootID }

// Config returns the applied snapshot of a config, or nil if none was
// applied yet. It takes no lock and allocates nothing.
func (c *Client) Config(id string) *Snapshot { return (*c.current.Load())[id] }

// Configs returns every applied snapshot, by config ID. The map is shared
// and must not be modified.
func (c *Client) Configs() map[string]*Snapshot { return *c.current.Load() }

// Wait returns the applied snapshot of a config, waiting until there is
// one, or ctx's error.
func (c *Client) Wait(ctx context.Context, id string) (*Snapshot, error) {
	return c.WaitFor(ctx, id, func(*Snapshot) bool { return true })
}

// WaitFor waits until the applied snapshot of a config satisfies cond,
// and returns it, or ctx's error.
func (c *Client) WaitFor(ctx context.Context, id string, cond func(*Snapshot) bool) (*Snapshot, error) {
	for {
		c.mu.Lock()
		s, changed := c.Config(id), c.changed
		c.mu.Unlock()
		if s != nil && cond(s) {
			return s, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("sdk: waiting for %s: %w (it has %s)", id, ctx.Err(), s)
		}
	}
}

// swap makes s the applied snapshot of its config, unless ctx ended (the
// apply was overtaken) or s's epoch is lower than the applied one's (an
// out-of-order assignment). It reports whether s was swapped in.
func (c *Client) swap(ctx context.Context, s *Snapshot) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ctx.Err() != nil {
		return false
	}
	old := *c.current.Load()
	if prev := old[s.Config]; prev != nil && s.Epoch < prev.Epoch {
		c.cfg.log.Warn("pawl: an assignment of a lower epoch was not applied", "config", s.Config, "generation", s.Generation,
			"epoch", s.Epoch, "applied", prev.String(), "applied_epoch", prev.Epoch)
		return false
	}
	next := make(map[string]*Snapshot, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[s.Config] = s
	c.current.Store(&next)
	kept := c.retained[s.Config]
	for i, r := range kept {
		if r.Generation == s.Generation {
			kept = append(kept[:i:i], kept[i+1:]...)
			break
		}
	}
	kept = append(kept, s)
	if len(kept) > c.cfg.retain {
		kept = kept[len(kept)-c.cfg.retain:]
	}
	c.retained[s.Config] = kept
	close(c.changed)
	c.changed = make(chan struct{})
	var to []*subscriber
	for _, sub := range c.subs {
		if sub.config == "" || sub.config == s.Config {
			to = append(to, sub)
		}
	}
	c.notes.post(s, to)
	return true
}

// retainedGeneration returns the snapshot of config id at generation gen if
// it is still retained, whether the client has the config at all, and a
// channel closed at the next swap.
func (c *Client) retainedGeneration(id string, gen int64) (*Snapshot, bool, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	kept, known := c.retained[id]
	for _, s := range kept {
		if s.Generation == gen {
			return s, true, c.changed
		}
	}
	return nil, known, c.changed
}

func newBootID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return time.Now().UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:])
}

// defaultHTTPClient speaks HTTP/2: over TLS for https URLs, with prior
// knowledge for http URLs (pawld serves h2c), and pings a connection that
// has been quiet, so that a server that vanished without closing it is
// noticed within about half a minute.
func defaultHTTPClient(tlsConfig *tls.Config) *http.Client {
	var p http.Protocols
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{
		Protocols:         &p,
		TLSClientConfig:   tlsConfig,
		HTTP2:             &http.HTTP2Config{SendPingTimeout: 15 * time.Second, PingTimeout: 10 * time.Second},
		ForceAttemptHTTP2: true,
	}
	return &http.Client{Transport: tr}
}

var errClosed = errors.New("sdk: the client is closed")
