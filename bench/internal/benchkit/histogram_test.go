package benchkit

import (
	"math"
	"testing"
	"time"
)

func TestHistogramQuantileInterpolatesWithinItsBucket(t *testing.T) {
	h := Histogram{Bounds: []float64{0.001, 0.005, 0.01, math.Inf(1)}, Counts: []float64{10, 30, 40, 40}}
	earlier := Histogram{Bounds: h.Bounds, Counts: []float64{10, 10, 10, 10}}
	d, err := h.Since(earlier)
	if err != nil {
		t.Fatal(err)
	}
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
	if all, err := h.Since(Histogram{}); err != nil || all.Count() != 40 {
		t.Errorf("since an empty read: %d observations, %v; want all 40", all.Count(), err)
	}
	if _, err := earlier.Since(h); err == nil {
		t.Error("counts that fell between reads were taken")
	}
	if _, err := h.Since(Histogram{Bounds: []float64{1, math.Inf(1)}, Counts: []float64{0, 0}}); err == nil {
		t.Error("reads with other buckets were taken")
	}
}
