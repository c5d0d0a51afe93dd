// Package metrics is pawld's Prometheus instrumentation: one registry
// owned by the server (never the global default), the series of
// docs/METRICS.md, and the hooks the other packages call when something
// happens (an RPC ends, a write commits, a validator compiles, a limit
// refuses). Series that describe a state (watch streams open, the store's
// size, rollout stages) are read from Sources when Prometheus scrapes.
//
// Every hook is safe on a nil *Metrics and does nothing there, so that a
// package used without metrics (a test, a tool) needs no stand-in. Labels
// are bounded: procedures are the registered ones, codes the seventeen
// Connect codes, limits the flags of LimitNames; nothing a client chooses
// (keys, config IDs, identities) becomes a label.
//
// The package imports no other package of Pawl, so that any may import
// it.
package metrics

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// namespace prefixes every series of pawld.
const namespace = "pawl"

// Metrics holds pawld's series and the registry they are served from. Its
// methods may be called concurrently.
type Metrics struct {
	reg *prometheus.Registry

	rpcStarted  *prometheus.CounterVec
	rpcHandled  *prometheus.CounterVec
	rpcDuration *prometheus.HistogramVec
	streamsOpen *prometheus.GaugeVec

	fanoutLag   prometheus.Histogram
	storeCommit *prometheus.HistogramVec

	compiles *prometheus.HistogramVec
	runs     *prometheus.HistogramVec

	acks     *prometheus.CounterVec
	ackBatch prometheus.Histogram
	ackMsg   prometheus.Histogram
	refusals *prometheus.CounterVec
}

// latencyBuckets span a cached read (100µs) to a slow write through a
// replicated Redis or a compile (10s).
var latencyBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// New makes the series and registers them, with the Go runtime's and the
// process's, in a registry of their own.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		rpcStarted: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "rpc_started_total",
			Help: "RPCs started, by procedure."}, []string{"procedure"}),
		rpcHandled: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "rpc_handled_total",
			Help: "RPCs finished, by procedure and Connect code (ok for success)."}, []string{"procedure", "code"}),
		rpcDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "rpc_duration_seconds",
			Help: "Time to answer a unary RPC, by procedure (streams are counted, not timed).", Buckets: latencyBuckets}, []string{"procedure"}),
		streamsOpen: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "rpc_streams_open",
			Help: "Streaming RPCs open now, by procedure."}, []string{"procedure"}),
		fanoutLag: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Name: "watch_fanout_lag_seconds",
			Help: "Time from a change's commit to its send on a KV watch stream (changes committed after the stream started).", Buckets: latencyBuckets}),
		storeCommit: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "store_commit_seconds",
			Help: "Time for the store to commit a put, delete or transaction, by outcome (ok or error).", Buckets: latencyBuckets}, []string{"outcome"}),
		compiles: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "validator_compile_seconds",
			Help: "Validator module loads (compilation, or the compilation cache), by outcome (ok or error).", Buckets: latencyBuckets}, []string{"outcome"}),
		runs: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "validator_run_seconds",
			Help: "Validations run by the server, by outcome (accepted, rejected or error).", Buckets: latencyBuckets}, []string{"outcome"}),
		acks: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "acks_total",
			Help: "ACKs received, by instance state and outcome (counted, not_counted, refused)."}, []string{"state", "outcome"}),
		ackBatch: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Name: "ack_batch_size",
			Help: "ACKs recorded per store transaction (ACKs are judged and committed in batches).", Buckets: prometheus.ExponentialBuckets(1, 2, 10)}),
		ackMsg: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Name: "session_acks_per_message",
			Help: "ACKs per session message that carries ACKs (a batch carries up to 64).", Buckets: prometheus.ExponentialBuckets(1, 2, 7)}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "limit_refusals_total",
			Help: "Requests and connections refused for a limit, by the limit's flag (docs/LIMITS.md)."}, []string{"limit"}),
	}
	m.reg.MustRegister(m.rpcStarted, m.rpcHandled, m.rpcDuration, m.streamsOpen, m.fanoutLag, m.storeCommit,
		m.compiles, m.runs, m.acks, m.ackBatch, m.ackMsg, m.refusals,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the registry in Prometheus's text (or negotiated)
// format. A source that fails is left out of the scrape and logged by
// the collector, never fails the whole scrape.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Outcomes of an ACK, as AckReceived counts it.
const (
	AckCounted    = "counted"
	AckNotCounted = "not_counted"
	AckRefused    = "refused"
)

// Outcomes of a validation, as ValidatorRan counts it.
const (
	RunAccepted = "accepted"
	RunRejected = "rejected"
	RunError    = "error"
)

// RPCStarted counts a call of procedure that began.
func (m *Metrics) RPCStarted(procedure string) {
	if m == nil {
		return
	}
	m.rpcStarted.WithLabelValues(procedure).Inc()
}

// RPCHandled counts a call of procedure that ended with code ("ok" for
// success) after d; only unary calls (stream false) are timed.
func (m *Metrics) RPCHandled(procedure, code string, d time.Duration, stream bool) {
	if m == nil {
		return
	}
	m.rpcHandled.WithLabelValues(procedure, code).Inc()
	if !stream {
		m.rpcDuration.WithLabelValues(procedure).Observe(d.Seconds())
	}
}

// StreamOpened counts a stream of procedure as open until the function it
// returns is called.
func (m *Metrics) StreamOpened(procedure string) (closed func()) {
	if m == nil {
		return func() {}
	}
	g := m.streamsOpen.WithLabelValues(procedure)
	g.Inc()
	return g.Dec
}

// FanoutLag records how long after its commit a change was sent to a
// watcher. A negative lag (the committing replica's clock is ahead) counts
// as none.
func (m *Metrics) FanoutLag(d time.Duration) {
	if m == nil {
		return
	}
	m.fanoutLag.Observe(max(d, 0).Seconds())
}

// StoreCommitted records a write's commit time and whether it failed.
func (m *Metrics) StoreCommitted(d time.Duration, err error) {
	if m == nil {
		return
	}
	m.storeCommit.WithLabelValues(outcome(err)).Observe(d.Seconds())
}

// ValidatorLoaded records a module's load (its compilation, or a hit of
// the compilation cache) and whether it failed.
func (m *Metrics) ValidatorLoaded(d time.Duration, err error) {
	if m == nil {
		return
	}
	m.compiles.WithLabelValues(outcome(err)).Observe(d.Seconds())
}

// ValidatorRan records a validation: RunAccepted, RunRejected or RunError.
func (m *Metrics) ValidatorRan(d time.Duration, result string) {
	if m == nil {
		return
	}
	m.runs.WithLabelValues(result).Observe(d.Seconds())
}

// AckReceived counts an ACK of an instance state (its enum name) with its
// outcome: AckCounted, AckNotCounted or AckRefused.
func (m *Metrics) AckReceived(state, result string) {
	if m == nil {
		return
	}
	m.acks.WithLabelValues(state, result).Inc()
}

// AckBatch records how many ACKs one store transaction recorded.
func (m *Metrics) AckBatch(acks int) {
	if m == nil {
		return
	}
	m.ackBatch.Observe(float64(acks))
}

// SessionAckMessage observes one session message that carried acks ACKs.
func (m *Metrics) SessionAckMessage(acks int) {
	if m == nil {
		return
	}
	m.ackMsg.Observe(float64(acks))
}

// Refused counts a refusal by a limit, named by its flag without dashes
// (LimitNames); any other name counts as "other", so that the label stays
// bounded.
func (m *Metrics) Refused(limit string) {
	if m == nil {
		return
	}
	if !knownLimit[limit] {
		limit = LimitOther
	}
	m.refusals.WithLabelValues(limit).Inc()
}

func outcome(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

// Sources are what the state series are read from when Prometheus
// scrapes; a nil field leaves its series out.
type Sources struct {
	// Watchers is the number of open watch streams.
	Watchers func() int
	// Revision is the store revision the watch hub has seen.
	Revision func() int64
	// Usage is the store's size, its quota (0: none) and whether the
	// NOSPACE alarm is raised; it is given a context that ends after
	// UsageTimeout.
	Usage func(ctx context.Context) (used, quota int64, noSpace bool, err error)
	// StageStates counts the stages of rollouts in flight by state.
	StageStates func() map[string]int
	// Connections is the number of connections open now.
	Connections func() int
}

// UsageTimeout bounds the read of the store's usage during a scrape: a
// store that does not answer leaves its series out of that scrape rather
// than hold the scrape past Prometheus's own timeout (10s by default).
const UsageTimeout = 3 * time.Second

// Observe registers the state series read from src. Call it once.
func (m *Metrics) Observe(src Sources) {
	m.reg.MustRegister(newStateCollector(src))
}

type contextKey struct{}

// request is what Middleware puts on a request's context.
type request struct {
	m *Metrics
	// bodyRefused says the guard of request bodies refused, and counted,
	// this request's body (RefusedBody).
	bodyRefused atomic.Bool
}

// Middleware puts m on every request's context, for the parts of a
// request's handling that have no other way to reach it (the guard of
// request bodies, a watch stream's sends).
func (m *Metrics) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), contextKey{}, &request{m: m})))
	})
}

// FromContext returns the Metrics that Middleware put on ctx, or nil
// (whose hooks do nothing).
func FromContext(ctx context.Context) *Metrics {
	if r, ok := ctx.Value(contextKey{}).(*request); ok {
		return r.m
	}
	return nil
}

// RefusedBody counts the refusal of the body of the request of ctx by
// limit (Refused), and notes it, so that the RPC interceptor, which sees
// the same refusal again when the call is a stream, does not count it
// twice (BodyRefused).
func RefusedBody(ctx context.Context, limit string) {
	r, ok := ctx.Value(contextKey{}).(*request)
	if !ok {
		return
	}
	r.m.Refused(limit)
	r.bodyRefused.Store(true)
}

// BodyRefused reports whether RefusedBody counted the refusal of the body
// of the request of ctx.
func BodyRefused(ctx context.Context) bool {
	r, ok := ctx.Value(contextKey{}).(*request)
	return ok && r.bodyRefused.Load()
}
