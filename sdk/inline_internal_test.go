package sdk

import (
	"testing"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
)

// TestAClientKeepsTheInlineReleasesOfTheConfigsItFollows: a client that
// follows some configs only (WithConfigs) keeps none of the releases a
// session sends inline for the others; one that follows every config
// keeps them all.
func TestAClientKeepsTheInlineReleasesOfTheConfigsItFollows(t *testing.T) {
	msg := &pawlv1.WatchAssignmentsResponse{Full: true, Assignments: []*pawlv1.Assignment{
		{ConfigId: "routing", Generation: 2},
		{ConfigId: "limits", Generation: 5},
	}}
	rels := []*pawlv1.Release{
		{Generation: 2, Spec: &pawlv1.ReleaseSpec{ConfigId: "routing", Content: []byte(`{}`)}},
		{Generation: 5, Spec: &pawlv1.ReleaseSpec{ConfigId: "limits", Content: []byte(`{}`)}},
	}
	for _, c := range []struct {
		follows map[string]bool
		want    map[string]bool
	}{
		{map[string]bool{"routing": true}, map[string]bool{"routing": true, "limits": false}},
		{nil, map[string]bool{"routing": true, "limits": true}},
	} {
		r := newInlineReleases((&config{configs: c.follows}).follows)
		r.keep(msg, rels)
		for _, a := range msg.GetAssignments() {
			if _, ok := r.get(a); ok != c.want[a.GetConfigId()] {
				t.Errorf("following %v: holds %s: %v, want %v", c.follows, a.GetConfigId(), ok, c.want[a.GetConfigId()])
			}
		}
	}
}
