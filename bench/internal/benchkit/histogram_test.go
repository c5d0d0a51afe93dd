package benchkit

import (
	"math"
	"testing"
	"time"
)

func TestHistogramQuantileInterpolatesWithinItsBucket(t *testing.T) {
	h := Histogram{Bounds: []float64{0.001, 0.005, 0.01, math.Inf(1)}, Counts: []float64{10, 30, 40, 40}}
	earlier := Histogram{Bounds: h.Bounds, Counts: []float64{10, 10, 10, 10}}
	d := h.Since(earlier)
	if d.Count() != 30 {
		t.Fatalf("count %d, want 30", d.Count())
	}
	// 20 in (1 ms, 5 ms], 10 in (5 ms, 10 ms]: the median is the 15th,
	// three quarters into the first.
	if got, want := d.Quantile(0.5), 4*time.Millisecond; got != want {
		t.Errorf("p50 %v, want %v", got, want)
	}
	if got, want := d.Quantile(0.99), 9850*time.Microsecond; got < want-time.Microsecond || got > want+time.Microsecond {
		t.Errorf("p99 %v, want %v", got, want)
	}
}
