package sdk

import (
	"testing"
	"time"
)

// TestTheHealthRingGrowsAsRequestsComeAndKeepsTheLatest: a recorder that
// measured nothing holds no samples; past healthSamples outcomes it keeps
// the latest healthSamples, and a window reads only those since its start.
func TestTheHealthRingGrowsAsRequestsComeAndKeepsTheLatest(t *testing.T) {
	h := newHealthRecorder()
	if cap(h.samples) != 0 {
		t.Fatalf("a recorder that measured nothing holds room for %d samples", cap(h.samples))
	}
	base := time.Unix(1_000_000, 0)
	// healthSamples+100 outcomes, one per millisecond: the first 100
	// (which failed, slowly) fall out of the ring.
	for i := range healthSamples + 100 {
		failed := i < 100
		latency := time.Millisecond
		if failed {
			latency = time.Second
		}
		h.record(base.Add(time.Duration(i)*time.Millisecond), latency, failed)
	}
	if len(h.samples) != healthSamples {
		t.Fatalf("the ring holds %d samples, want %d", len(h.samples), healthSamples)
	}
	all := h.since(base)
	if all.Requests != healthSamples || all.ErrorRate != 0 || all.P99 != time.Millisecond {
		t.Fatalf("the whole ring measured %+v; want %d requests, none failed, p99 1ms (the oldest 100 fell out)", all, healthSamples)
	}
	late := h.since(base.Add(time.Duration(healthSamples) * time.Millisecond))
	if late.Requests != 100 {
		t.Fatalf("a window over the last 100 requests counted %d", late.Requests)
	}
}
