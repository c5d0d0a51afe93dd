package benchkit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Histogram is a Prometheus histogram read from a /metrics page: the
// cumulative count of observations at or under each bucket's upper bound,
// in seconds, in increasing order of bound (the last is +Inf).
type Histogram struct {
	Bounds []float64
	Counts []float64
}

// ReadHistogram reads the histogram series of family (a name such as
// pawl_rpc_duration_seconds) whose labels contain match (such as
// procedure="/pawl.v1.KVService/Put"; empty for a series without labels
// other than le) from the /metrics page at url. A series the page does not
// have yet (nothing observed) reads as an empty histogram.
func ReadHistogram(ctx context.Context, url, family, match string) (Histogram, error) {
	page, err := get(ctx, url)
	if err != nil {
		return Histogram{}, err
	}
	var h Histogram
	for _, line := range strings.Split(string(page), "\n") {
		rest, ok := strings.CutPrefix(line, family+"_bucket{")
		if !ok || !strings.Contains(rest, match) {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		_, le, ok := strings.Cut(labels, `le="`)
		if !ok {
			continue
		}
		le, _, _ = strings.Cut(le, `"`)
		bound, err := strconv.ParseFloat(le, 64) // "+Inf" parses as +Inf
		if err != nil {
			return Histogram{}, fmt.Errorf("%s: bucket bound %q: %w", family, le, err)
		}
		count, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return Histogram{}, fmt.Errorf("%s: bucket count %q: %w", family, value, err)
		}
		h.Bounds, h.Counts = append(h.Bounds, bound), append(h.Counts, count)
	}
	if !slices.IsSorted(h.Bounds) {
		return Histogram{}, fmt.Errorf("%s{%s}: buckets out of order", family, match)
	}
	return h, nil
}

// Since returns the observations h holds that earlier did not: the
// histogram of what happened between two reads of the same series (all
// of h when earlier is empty, the series not there yet). Reads with other
// buckets, or with fewer observations in a bucket (the server restarted
// between them), are an error.
func (h Histogram) Since(earlier Histogram) (Histogram, error) {
	d := Histogram{Bounds: h.Bounds, Counts: slices.Clone(h.Counts)}
	if len(earlier.Bounds) == 0 {
		return d, nil
	}
	if !slices.Equal(h.Bounds, earlier.Bounds) {
		return Histogram{}, fmt.Errorf("histogram buckets changed between reads: %v, then %v", earlier.Bounds, h.Bounds)
	}
	for i := range d.Counts {
		if d.Counts[i] -= earlier.Counts[i]; d.Counts[i] < 0 {
			return Histogram{}, errors.New("histogram counts fell between reads: the server restarted")
		}
	}
	return d, nil
}

// Count is the number of observations.
func (h Histogram) Count() int {
	if len(h.Counts) == 0 {
		return 0
	}
	return int(h.Counts[len(h.Counts)-1])
}

// Quantile estimates the q-quantile (0 < q < 1) as Prometheus's
// histogram_quantile does: linearly within the bucket it falls in. It is
// only as fine as the buckets.
func (h Histogram) Quantile(q float64) time.Duration {
	total := float64(h.Count())
	if total == 0 {
		return 0
	}
	rank := q * total
	lower, below := 0.0, 0.0
	for i, bound := range h.Bounds {
		if h.Counts[i] >= rank {
			if math.IsInf(bound, 1) {
				return time.Duration(lower * float64(time.Second))
			}
			in := h.Counts[i] - below
			at := bound
			if in > 0 {
				at = lower + (bound-lower)*(rank-below)/in
			}
			return time.Duration(at * float64(time.Second))
		}
		lower, below = bound, h.Counts[i]
	}
	return time.Duration(lower * float64(time.Second))
}
