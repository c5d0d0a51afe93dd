package rollout_test

import (
	"errors"
	"testing"

	"github.com/pawlcfg/pawl/server/internal/rollout"
)

func TestTraceIDFollowsTheW3CFormat(t *testing.T) {
	const id = "4bf92f3577b34da6a3ce929d0e0e4736"
	for _, c := range []struct {
		in, want string
	}{
		{"", ""},
		{"00-" + id + "-00f067aa0ba902b7-01", id},
		{"00-" + id + "-00f067aa0ba902b7-00", id},
		{"01-" + id + "-00f067aa0ba902b7-01-later-fields", id}, // a later version may add fields
		{"01-" + id + "-00f067aa0ba902b7-01", id},
	} {
		if got, err := rollout.TraceID(c.in); err != nil || got != c.want {
			t.Errorf("TraceID(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{
		"garbage",
		"00-" + id + "-00f067aa0ba902b7-01-extra",                           // version 00 has four fields
		"ff-" + id + "-00f067aa0ba902b7-01",                                 // version ff is invalid
		"00-" + "4BF92F3577B34DA6A3CE929D0E0E4736" + "-00f067aa0ba902b7-01", // upper case
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01",           // all-zero trace ID
		"00-" + id + "-0000000000000000-01",                                 // all-zero parent ID
		"00-" + id + "-00f067aa0ba902b7-0g",                                 // flags not hex
		"00_" + id + "-00f067aa0ba902b7-01",                                 // separator
		"01-" + id + "-00f067aa0ba902b7-01x",                                // a later version's extra field needs a '-'
	} {
		if got, err := rollout.TraceID(bad); !errors.Is(err, rollout.ErrInvalid) {
			t.Errorf("TraceID(%q) = %q, %v; want ErrInvalid", bad, got, err)
		}
	}
}
