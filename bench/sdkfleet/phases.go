package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/pawlcfg/pawl/bench/internal/benchkit"
)

// phaseSteps are the SDK's spans of one assignment's steps, in order,
// under its pawl.rollout span.
var phaseSteps = []string{"pawl.download", "pawl.verify", "pawl.validate", "pawl.stage", "pawl.apply"}

// phases records, from the clients' spans, when each client reached each
// step of one generation's assignment: where the time from Promote to
// the swap goes, over the whole fleet. It is the span processor of the
// clients' tracer provider (with -phases).
type phases struct {
	mu    sync.Mutex
	gen   int64                      // the generation recorded; 0: none
	roots map[trace.SpanID]struct{}  // that generation's pawl.rollout spans
	start []time.Time                // each root's start: the assignment taken
	ends  map[string][]time.Time     // each step's ends, by span name
	durs  map[string][]time.Duration // each step's durations, by span name
	gaps  map[string][]time.Duration // from the previous step's end to this step's start
	last  map[trace.SpanID]time.Time // the last step's end, by root
}

var _ sdktrace.SpanProcessor = (*phases)(nil)

// record starts recording generation gen, forgetting what came before.
func (p *phases) record(gen int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gen, p.roots, p.start = gen, map[trace.SpanID]struct{}{}, nil
	p.ends, p.durs, p.gaps, p.last = map[string][]time.Time{}, map[string][]time.Duration{}, map[string][]time.Duration{}, map[trace.SpanID]time.Time{}
}

// OnStart implements sdktrace.SpanProcessor: it notes the recorded
// generation's pawl.rollout spans.
func (p *phases) OnStart(_ context.Context, s sdktrace.ReadWriteSpan) {
	if s.Name() != "pawl.rollout" {
		return
	}
	gen := int64(-1)
	for _, kv := range s.Attributes() {
		if kv.Key == attribute.Key("pawl.generation") {
			gen = kv.Value.AsInt64()
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gen != 0 && gen == p.gen {
		p.roots[s.SpanContext().SpanID()] = struct{}{}
		p.start = append(p.start, s.StartTime())
		p.last[s.SpanContext().SpanID()] = s.StartTime()
	}
}

// OnEnd implements sdktrace.SpanProcessor: it records the steps of the
// recorded generation's assignments.
func (p *phases) OnEnd(s sdktrace.ReadOnlySpan) {
	if !slices.Contains(phaseSteps, s.Name()) {
		return
	}
	root := s.Parent().SpanID()
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.roots[root]; !ok {
		return
	}
	name := s.Name()
	p.ends[name] = append(p.ends[name], s.EndTime())
	p.durs[name] = append(p.durs[name], s.EndTime().Sub(s.StartTime()))
	p.gaps[name] = append(p.gaps[name], s.StartTime().Sub(p.last[root]))
	p.last[root] = s.EndTime()
}

// Shutdown implements sdktrace.SpanProcessor.
func (p *phases) Shutdown(context.Context) error { return nil }

// ForceFlush implements sdktrace.SpanProcessor.
func (p *phases) ForceFlush(context.Context) error { return nil }

// report adds to t, for the recorded generation promoted at promoted:
// when the clients took the assignment and ended each step (p50 and
// p99 over the clients, since Promote), each step's own duration, and
// the wait before it (from the previous step's end, or the assignment).
func (p *phases) report(t *benchkit.Table, promoted time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	since := func(ts []time.Time) []time.Duration {
		out := make([]time.Duration, len(ts))
		for i, x := range ts {
			out[i] = x.Sub(promoted)
		}
		return out
	}
	t.Add(fmt.Sprintf("phases of generation %d: assignment taken (p50, p99 since Promote; %d clients)", p.gen, len(p.start)), pcts(since(p.start)))
	for _, name := range phaseSteps {
		t.Add(fmt.Sprintf("phases: %s ended (p50, p99 since Promote)", name), pcts(since(p.ends[name])))
		t.Add(fmt.Sprintf("phases: %s took (p50, p99); waited before it (p50, p99)", name), pcts(p.durs[name])+"; "+pcts(p.gaps[name]))
	}
}

// pcts is "p50, p99" of ds, or "none".
func pcts(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	r := func(d time.Duration) time.Duration { return d.Round(100 * time.Microsecond) }
	return fmt.Sprintf("%s, %s", r(benchkit.Percentile(ds, 0.5)), r(benchkit.Percentile(ds, 0.99)))
}
