package api

import (
	"context"
	"fmt"
	"testing"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
)

// TestInlineReleasesStayWithinTheirBound: the releases a message of
// assignments carries stay within maxInlineReleaseBytes: one that does
// not fit is left out (its instance downloads it) while a smaller one
// after it still goes, and each release goes once.
func TestInlineReleasesStayWithinTheirBound(t *testing.T) {
	r := &inlineReleases{built: map[inlineKey]*pawlv1.Release{}}
	msg := &pawlv1.SessionResponse{Assignments: &pawlv1.WatchAssignmentsResponse{}}
	for _, c := range []struct {
		config string
		size   int
	}{{"a", 700 << 10}, {"b", 400 << 10}, {"c", 100 << 10}} {
		digest := "sha256:" + c.config
		r.built[inlineKey{config: c.config, digest: digest, gen: 1}] = &pawlv1.Release{
			Generation: 1, ContentDigest: digest,
			Spec: &pawlv1.ReleaseSpec{ConfigId: c.config, Content: make([]byte, c.size)},
		}
		msg.Assignments.Assignments = append(msg.Assignments.Assignments,
			&pawlv1.Assignment{ConfigId: c.config, Generation: 1, ContentDigest: digest})
	}
	// An assignment named twice: its release goes once.
	msg.Assignments.Assignments = append(msg.Assignments.Assignments, msg.Assignments.Assignments[2])
	r.addReleases(context.Background(), msg)
	var got []string
	for _, rel := range msg.Releases {
		got = append(got, rel.GetSpec().GetConfigId())
	}
	if fmt.Sprint(got) != "[a c]" {
		t.Fatalf("inline releases %v, want [a c]: b (400 KiB) does not fit after a (700 KiB) in 1 MiB, c does", got)
	}
}
