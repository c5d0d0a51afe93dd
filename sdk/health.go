package sdk

import (
	"context"
	"slices"
	"sync"
	"time"
)

// healthSamples is how many recent request outcomes the recorder keeps:
// enough for a p99 over a health window of a busy service.
const healthSamples = 8192

// healthRecorder keeps the outcomes of the most recent requests the
// middleware and interceptor measured, with their times, so that each
// health window reads the error rate and p99 of the requests it spans.
// The ring grows as requests come, up to healthSamples: a client that
// serves no requests (an agent, a job) holds none.
type healthRecorder struct {
	mu      sync.Mutex
	samples []sample // a ring of at most healthSamples
	next    int      // where the next sample goes once the ring is full
}

// sample is one request's outcome: when it ended (Unix nanoseconds),
// how long it took, and whether it failed.
type sample struct {
	at      int64
	latency time.Duration
	failed  bool
}

func newHealthRecorder() *healthRecorder { return &healthRecorder{} }

// record adds one request outcome.
func (h *healthRecorder) record(at time.Time, latency time.Duration, failed bool) {
	s := sample{at: at.UnixNano(), latency: latency, failed: failed}
	h.mu.Lock()
	if len(h.samples) < healthSamples {
		h.samples = append(h.samples, s)
	} else {
		h.samples[h.next] = s
		h.next = (h.next + 1) % healthSamples
	}
	h.mu.Unlock()
}

// Measurement is what the instance measured over a health window.
type Measurement struct {
	// Requests is how many requests were measured.
	Requests int
	// ErrorRate is the share of failed requests.
	ErrorRate float64
	// P99 is the 99th percentile latency.
	P99 time.Duration
}

// since measures the requests that ended at or after start (as many as the
// recorder still holds).
func (h *healthRecorder) since(start time.Time) Measurement {
	from := start.UnixNano()
	h.mu.Lock()
	var lat []time.Duration
	failed := 0
	for _, s := range h.samples {
		if s.at < from {
			continue
		}
		lat = append(lat, s.latency)
		if s.failed {
			failed++
		}
	}
	h.mu.Unlock()
	if len(lat) == 0 {
		return Measurement{}
	}
	slices.Sort(lat)
	// The nearest-rank 99th percentile.
	rank := (99*len(lat) + 99) / 100
	return Measurement{Requests: len(lat), ErrorRate: float64(failed) / float64(len(lat)), P99: lat[rank-1]}
}

// ReportOutcome feeds one request's outcome to the health windows, as the
// middleware and the interceptor do for the requests they serve: servers
// they do not wrap (a gRPC server, a queue consumer, a batch job) report
// each unit of work here, its latency and whether it failed (a failure of
// the service's, not the caller's bad input). Releases on trial judge
// their error rate and p99 from these samples with the measured ones.
func (c *Client) ReportOutcome(ctx context.Context, latency time.Duration, ok bool) {
	_ = ctx // reserved for tracing and exemplars
	c.health.record(time.Now(), max(latency, 0), !ok)
}
