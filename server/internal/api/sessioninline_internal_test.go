package api

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/server/internal/records"
	"github.com/pawlcfg/pawl/server/internal/release"
	"github.com/pawlcfg/pawl/server/internal/store"
	"github.com/pawlcfg/pawl/server/internal/store/boltstore"
)

// TestInlineReleasesStayWithinTheirBound: on a real store, the releases a
// message of assignments carries stay within maxInlineReleaseBytes as
// marshaled: one that does not fit is left out (its instance downloads
// it) while a smaller one after it still goes; one too large to ever go
// inline is neither sent nor kept built; one the client holds is not
// sent; each goes once.
func TestInlineReleasesStayWithinTheirBound(t *testing.T) {
	ctx := context.Background()
	st, err := boltstore.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	msg := &pawlv1.SessionResponse{Assignments: &pawlv1.WatchAssignmentsResponse{}}
	for _, c := range []struct {
		config string
		size   int
	}{{"a", 700 << 10}, {"b", 400 << 10}, {"c", 100 << 10}, {"big", maxInlineReleaseBytes + 1}, {"held", 10}} {
		rel := release.Release{
			Spec:       release.Spec{ConfigID: c.config, Content: bytes.Repeat([]byte("x"), c.size), MediaType: "text/plain"},
			Generation: 1, ContentDigest: "sha256:" + c.config,
		}
		v, err := records.Encode(rel)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Put(ctx, store.Put{Key: records.Release(c.config, 1), Value: v}); err != nil {
			t.Fatal(err)
		}
		msg.Assignments.Assignments = append(msg.Assignments.Assignments,
			&pawlv1.Assignment{ConfigId: c.config, Generation: 1, ContentDigest: rel.ContentDigest})
	}
	// An assignment named twice: its release goes once.
	msg.Assignments.Assignments = append(msg.Assignments.Assignments, msg.Assignments.Assignments[2])
	r := newInlineReleases(release.New(st, nil, nil))
	held := map[inlineKey]bool{{config: "held", digest: "sha256:held", gen: 1}: true}
	added := r.addReleases(ctx, msg, held)
	var got []string
	wire := 0
	for _, rel := range msg.Releases {
		got = append(got, rel.GetSpec().GetConfigId())
		wire += proto.Size(rel)
	}
	if fmt.Sprint(got) != "[a c]" {
		t.Fatalf("inline releases %v, want [a c]: b (400 KiB) does not fit after a (700 KiB) in 1 MiB, c does; big never; held is held", got)
	}
	if wire != added || wire > maxInlineReleaseBytes {
		t.Fatalf("%d bytes of releases marshaled, %d counted; the bound is %d", wire, added, maxInlineReleaseBytes)
	}
	kept := 0
	for k, b := range r.built {
		if k.config == "big" {
			kept += len(b.rel.GetSpec().GetContent())
		}
	}
	if kept > 0 {
		t.Fatalf("the release too large to go inline is kept built (%d bytes of content)", kept)
	}
}

// TestInlineReleasesCountWhatTheyMarshal: the bound is on the releases
// as marshaled, not only their content: 8,000 small configs with their
// stages, selectors and digests stay within it.
func TestInlineReleasesCountWhatTheyMarshal(t *testing.T) {
	r := &inlineReleases{built: map[inlineKey]builtRelease{}}
	msg := &pawlv1.SessionResponse{Assignments: &pawlv1.WatchAssignmentsResponse{Full: true}}
	for i := range 8000 {
		config, digest := fmt.Sprintf("feature-flag-%05d", i), fmt.Sprintf("sha256:%064x", i)
		rel := &pawlv1.Release{
			Generation: 3, Predecessor: 2, ContentDigest: digest, MemberCount: 10000, CreatedBy: "ci-bot@deploy.example.com",
			Spec: &pawlv1.ReleaseSpec{
				ConfigId: config, Content: []byte(`{"on":true}`), MediaType: "application/json", ValidatorDigest: digest,
				Selector: map[string]string{"app": "checkout", "env": "production"}, HealthWindow: durationpb.New(time.Minute),
				Stages: []*pawlv1.Stage{{Name: "canary", Selector: map[string]string{"canary": "true"}}, {Name: "everyone"}},
			},
		}
		r.built[inlineKey{config: config, digest: digest, gen: 3}] = builtRelease{rel: rel, size: proto.Size(rel)}
		msg.Assignments.Assignments = append(msg.Assignments.Assignments, &pawlv1.Assignment{ConfigId: config, Generation: 3, ContentDigest: digest})
	}
	r.addReleases(context.Background(), msg, nil)
	wire := 0
	for _, rel := range msg.Releases {
		wire += proto.Size(rel)
	}
	if len(msg.Releases) == 0 || len(msg.Releases) == 8000 || wire > maxInlineReleaseBytes {
		t.Fatalf("%d of 8000 releases inline, %d bytes marshaled; want some, within %d", len(msg.Releases), wire, maxInlineReleaseBytes)
	}
}
