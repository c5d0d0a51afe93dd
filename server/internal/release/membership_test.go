package release_test

import (
	"context"
	"fmt"
	"maps"
	"testing"

	"github.com/pawlcfg/pawl/server/internal/quorum"
	"github.com/pawlcfg/pawl/server/internal/release"
)

// TestAMembershipIsIndexedAndSharedNeverMixed: a release finds each of its
// members by identity and nobody else (identities that sort among them,
// prefixes, a newcomer), whether it was just created, read back from the
// store or written as a literal; two releases share the members they
// froze equal, and a member whose registration changed between them is
// seen by each release as it froze it.
func TestAMembershipIsIndexedAndSharedNeverMixed(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.members = []quorum.Member{
		{ID: "i10", Zone: "a", Role: "worker", Weight: 1, Labels: map[string]string{"tier": "1"}},
		{ID: "i1", Zone: "a", Role: "worker", Weight: 1},
		{ID: "i2", Zone: "b", Role: "worker", Weight: 1, Labels: map[string]string{"tier": "1"}},
		{ID: "a/b", Zone: "b", Role: "worker", Weight: 2},
		{ID: "a", Zone: "a", Role: "db", Weight: 1},
		{ID: "z", Zone: "a", Role: "db", Weight: 1},
	}
	first, err := f.releases.Create(ctx, f.spec(goodTable), "alice")
	if err != nil {
		t.Fatal(err)
	}
	// i2 registered again in another zone with other labels, z in another
	// zone, i10 with another weight, and i15 joined.
	f.mu.Lock()
	f.members[5].Zone = "b"
	f.members[2] = quorum.Member{ID: "i2", Zone: "c", Role: "worker", Weight: 1, Labels: map[string]string{"tier": "2"}}
	f.members[0].Weight = 3
	f.members = append(f.members, quorum.Member{ID: "i15", Zone: "c", Role: "worker", Weight: 1})
	f.mu.Unlock()
	second, err := f.releases.Create(ctx, f.spec(`{"upstreams":[{"host":"a","weight":100}]}`), "bob")
	if err != nil {
		t.Fatal(err)
	}
	// Read back by a Releases with an empty cache: decoded from the store.
	fresh := release.New(f.store, nil, nil)
	stored := func(gen int64) release.Release {
		rel, err := fresh.Get(ctx, "payments.routing", gen)
		if err != nil {
			t.Fatal(err)
		}
		return rel
	}
	firstStored, secondStored := stored(1), stored(2)
	literal := release.Release{Membership: []*quorum.Member{{ID: "i2"}, {ID: "i1"}}}

	for name, c := range map[string]struct {
		rel      release.Release
		in, away []string
	}{
		"created first":  {first, []string{"i10", "i1", "i2", "a/b", "a", "z"}, []string{"i15", "i", "i0", "i100", "i3", "a/", "", "b"}},
		"stored first":   {firstStored, []string{"i10", "i1", "i2", "a/b", "a", "z"}, []string{"i15", "i", "i0", "i100", "i3", "a/", "", "b"}},
		"created second": {second, []string{"i10", "i1", "i2", "a/b", "a", "z", "i15"}, []string{"i", "i150", "i14", "a/bc", ""}},
		"stored second":  {secondStored, []string{"i10", "i1", "i2", "a/b", "a", "z", "i15"}, []string{"i", "i150", "i14", "a/bc", ""}},
		"literal":        {literal, []string{"i2", "i1"}, []string{"i10", "i", ""}},
	} {
		for _, id := range c.in {
			if j, ok := c.rel.MemberIndex(id); !ok || c.rel.Membership[j].ID != id {
				t.Errorf("%s: MemberIndex(%q) = %d, %v", name, id, j, ok)
			}
		}
		for _, id := range c.away {
			if j, ok := c.rel.MemberIndex(id); ok {
				t.Errorf("%s: MemberIndex(%q) = %d, true; not a member", name, id, j)
			}
		}
	}

	member := func(rel release.Release, id string) *quorum.Member {
		j, ok := rel.MemberIndex(id)
		if !ok {
			t.Fatalf("generation %d lacks %s", rel.Generation, id)
		}
		return rel.Membership[j]
	}
	for _, want := range []struct {
		rels           []release.Release
		i2Zone, i2Tier string
		zZone          string
		i10Weight      float64
	}{
		{[]release.Release{first, firstStored}, "b", "1", "a", 1},
		{[]release.Release{second, secondStored}, "c", "2", "b", 3},
	} {
		for _, rel := range want.rels {
			i2, z, i10 := member(rel, "i2"), member(rel, "z"), member(rel, "i10")
			if i2.Zone != want.i2Zone || !maps.Equal(i2.Labels, map[string]string{"tier": want.i2Tier}) || z.Zone != want.zZone || i10.Weight != want.i10Weight {
				t.Errorf("generation %d sees i2 as %+v, z as %+v, i10 as %+v; it froze i2 in zone %s with tier %s, z in zone %s, i10 with weight %g",
					rel.Generation, *i2, *z, *i10, want.i2Zone, want.i2Tier, want.zZone, want.i10Weight)
			}
		}
	}
	// What both froze equal, they share: a release costs a pointer per
	// member, not a copy.
	for _, id := range []string{"i1", "a/b", "a"} {
		if member(firstStored, id) != member(secondStored, id) || member(first, id) != member(firstStored, id) {
			t.Errorf("%s is frozen equal in both generations but not shared", id)
		}
	}
	var order []string
	for _, m := range firstStored.Membership {
		order = append(order, m.ID)
	}
	if fmt.Sprint(order) != "[i10 i1 i2 a/b a z]" {
		t.Errorf("the stored membership is %v; it was frozen in the order [i10 i1 i2 a/b a z]", order)
	}
}
