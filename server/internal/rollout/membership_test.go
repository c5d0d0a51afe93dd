package rollout_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/pawlcfg/pawl/server/internal/quorum"
	"github.com/pawlcfg/pawl/server/internal/release"
	"github.com/pawlcfg/pawl/server/internal/rollout"
)

// TestRetirementsMakeMembershipGenerationsThatTheReceiptLists: each
// retirement moves the frozen membership to its next generation, two at
// once included (each decides against the other's, so no generation is
// made twice), and the receipt of the promotion that relied on them names
// the membership generation and every retirement, in order.
func TestRetirementsMakeMembershipGenerationsThatTheReceiptLists(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	rel := e.releaseWith(t, 50, func(s *release.Spec) { s.Stages[0].Policy = quorum.Policy{Kind: quorum.All} })
	if st := e.status(t, 1); st.MembershipGeneration != 1 || len(st.Retirements) != 0 {
		t.Fatalf("as frozen: membership generation %d, retirements %+v", st.MembershipGeneration, st.Retirements)
	}
	for _, id := range []string{"i0", "i1", "i2", "i3"} {
		e.ack(t, rel, id, "boot-1", 1, rollout.HealthyAcked)
	}
	gens := map[string]int64{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, id := range []string{"i4", "i5"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rt, err := e.rollouts.Retire(ctx, "routing", 1, id, "host decommissioned", "oncall")
			if err != nil {
				t.Errorf("Retire(%s) = %v", id, err)
				return
			}
			mu.Lock()
			gens[id] = rt.MembershipGeneration
			mu.Unlock()
		}()
	}
	wg.Wait()
	if g4, g5 := gens["i4"], gens["i5"]; g4+g5 != 5 || g4 == g5 {
		t.Fatalf("the two retirements made membership generations %d and %d, want 2 and 3", g4, g5)
	}
	st := e.status(t, 1)
	if st.MembershipGeneration != 3 || len(st.Retirements) != 2 || st.Retirements[0].MembershipGeneration != 2 {
		t.Fatalf("after two retirements: membership generation %d, retirements %+v", st.MembershipGeneration, st.Retirements)
	}
	rc, err := e.rollouts.Promote(ctx, rollout.Move{ConfigID: "routing", To: 1, IdempotencyKey: "p1"})
	if err != nil {
		t.Fatal(err)
	}
	if rc.MembershipGeneration != 3 || len(rc.Retirements) != 2 || rc.Retirements[0].MembershipGeneration != 2 ||
		rc.Retirements[1].MembershipGeneration != 3 || rc.Retirements[0].Reason != "host decommissioned" {
		t.Fatalf("receipt: membership generation %d, retirements %+v", rc.MembershipGeneration, rc.Retirements)
	}
	if got, err := e.rollouts.GetPromotion(ctx, "routing", "p1"); err != nil || len(got.Retirements) != 2 || got.MembershipGeneration != 3 {
		t.Fatalf("the stored receipt = %+v, %v", got, err)
	}
}

// TestMembersAreFoundByIdentityOnly: a plan finds its members through the
// release's index by identity, so instances that registered after the
// freeze with identities that sort before, among and after the members
// (and one that is a member's prefix) are no members: they are assigned
// nothing of the candidate, and their ACKs neither count nor dilute the
// quorum; a retired member's neither, and the others' still do.
func TestMembersAreFoundByIdentityOnly(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	rel := e.releaseWith(t, 50, func(s *release.Spec) { s.Stages[0].Policy = quorum.Policy{Kind: quorum.All} })
	late := []string{"h", "i", "i0a", "i3x", "i6", "j"}
	for _, id := range late {
		e.register(t, id, "boot-1", "zone-a")
	}
	for _, id := range late {
		if got := e.assignments(t, id); got != "" {
			t.Errorf("%s registered after the freeze and is assigned %q", id, got)
		}
		if a := e.ack(t, rel, id, "boot-1", 1, rollout.HealthyAcked); a.Counted || !strings.Contains(a.Why, "not in the release's frozen membership") {
			t.Errorf("ACK of %s, who registered after the freeze = %+v", id, a)
		}
	}
	if _, err := e.rollouts.Retire(ctx, "routing", 1, "i2", "host decommissioned", "oncall"); err != nil {
		t.Fatal(err)
	}
	// Nobody reported what it runs yet: the coverage misses exactly the
	// unretired members.
	if c := e.status(t, 1).Coverage; c.Members != 5 || fmt.Sprint(c.Missing) != "[i0 i1 i3 i4 i5]" {
		t.Fatalf("coverage %+v; want the 5 unretired members missing", c)
	}
	if a := e.ack(t, rel, "i2", "boot-1", 1, rollout.HealthyAcked); a.Counted {
		t.Errorf("ACK of the retired i2 = %+v", a)
	}
	for _, id := range []string{"i0", "i1", "i3", "i4"} {
		if got := e.assignments(t, id); got != "1:zones" {
			t.Errorf("member %s is assigned %q", id, got)
		}
		if a := e.ack(t, rel, id, "boot-1", 1, rollout.HealthyAcked); !a.Counted {
			t.Errorf("ACK of member %s = %+v", id, a)
		}
	}
	if ev := e.status(t, 1).Stages[0].Evaluation; ev.Outcome != quorum.Waiting || ev.Members != 5 || ev.Healthy != 4 {
		t.Fatalf("with i5 yet to report: %+v; want 4 of 5 healthy", ev)
	}

	e.ack(t, rel, "i5", "boot-1", 1, rollout.HealthyAcked)
	if ev := e.status(t, 1).Stages[0].Evaluation; ev.Outcome != quorum.Passed || ev.Members != 5 || ev.Healthy != 5 {
		t.Fatalf("every unretired member healthy: %+v", ev)
	}
}
