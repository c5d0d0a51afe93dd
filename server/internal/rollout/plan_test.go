package rollout_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pawlcfg/pawl/server/internal/quorum"
	"github.com/pawlcfg/pawl/server/internal/release"
	"github.com/pawlcfg/pawl/server/internal/rollout"
)

// members lists the six instances i0..i5 (zone-a: i0, i3; zone-b: i1,
// i4; zone-c: i2, i5).
func members() []string {
	var out []string
	for i := range 6 {
		out = append(out, fmt.Sprintf("i%d", i))
	}
	return out
}

// only returns the one member of a cohort.
func only(t *testing.T, cohort map[string]bool) string {
	t.Helper()
	if len(cohort) != 1 {
		t.Fatalf("cohort %v; want one member", cohort)
	}
	for id := range cohort {
		return id
	}
	return ""
}

// designsPlan is the plan the design is built around: every instance
// downloads and validates in a shadow stage, then 1% apply, then zone by
// zone.
func designsPlan(s *release.Spec) {
	s.Stages = []release.Stage{
		{Name: "validate", Shadow: true, Policy: quorum.Policy{Kind: quorum.All}},
		{Name: "canary", Policy: quorum.Policy{Kind: quorum.Fraction, Fraction: 0.01}},
		{Name: "zone-a", Selector: map[string]string{"zone": "zone-a"}, Policy: quorum.Policy{Kind: quorum.All}},
		{Name: "zone-b", Selector: map[string]string{"zone": "zone-b"}, Policy: quorum.Policy{Kind: quorum.All}},
		{Name: "zone-c", Selector: map[string]string{"zone": "zone-c"}, Policy: quorum.Policy{Kind: quorum.All}},
	}
}

// TestTheDesignsPlanRunsStageByStage: shadow validation for everyone, then
// a 1% canary, then zone by zone. A shadow stage takes nobody away from the
// stages that apply; no stage not yet reached stops the rollout (before
// the fix the first VALIDATED stopped it: the later stages had no members,
// "the frozen membership is empty"); a shadow VALIDATED counts for nothing
// in the stage that later assigns the instance the release to apply.
func TestTheDesignsPlanRunsStageByStage(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.promoted(t, 10)
	rel := e.releaseWith(t, 50, designsPlan)
	for _, id := range members() {
		if got := e.assignments(t, id); got != "1 ~2:validate" {
			t.Fatalf("%s is assigned %q; want generation 1 to run and 2 to validate", id, got)
		}
	}
	canary := only(t, rollout.Cohort(rel, 1)) // ceil(1% of 6)
	seq := int64(2)
	for _, id := range members() {
		if a := e.ack(t, rel, id, "boot-1", seq, rollout.Validated); !a.Counted || !a.Shadow {
			t.Fatalf("shadow VALIDATED of %s = %+v", id, a)
		}
		if st := e.status(t, 2); st.Stop != nil {
			t.Fatalf("after %s validated, the rollout stopped: %s (stage %q)", id, st.Stop.Reason, st.Stop.Stage)
		}
	}
	st := e.status(t, 2)
	if st.Stages[0].Evaluation.Outcome != quorum.Passed || !st.Stages[1].Reached || st.Stages[2].Reached {
		t.Fatalf("after every VALIDATED: %+v", st.Stages)
	}
	// The canary is assigned the release to apply; its shadow VALIDATED
	// says nothing about that.
	if got := e.assignments(t, canary); got != "2:canary" {
		t.Fatalf("the canary %s is assigned %q", canary, got)
	}
	if ev := st.Stages[1].Evaluation; ev.Members != 1 || ev.Healthy != 0 || st.Stages[1].States["NO_ACK"] != 1 {
		t.Fatalf("the canary stage after its member's shadow VALIDATED: %+v %v", ev, st.Stages[1].States)
	}
	// Stage by stage, each stage's instances apply and report healthy.
	seq++
	if a := e.ack(t, rel, canary, "boot-1", seq, rollout.HealthyAcked); !a.Counted || a.Shadow {
		t.Fatalf("the canary's HEALTHY_ACKED = %+v", a)
	}
	for stage, zone := range []string{"zone-a", "zone-b", "zone-c"} {
		stage += 2
		st := e.status(t, 2)
		if !st.Stages[stage].Reached || st.Stop != nil {
			t.Fatalf("stage %s not reached: %+v, stop %+v", zone, st.Stages, st.Stop)
		}
		for _, m := range rel.Membership {
			if m.Zone != zone || m.ID == canary {
				continue
			}
			if got := e.assignments(t, m.ID); got != "2:"+zone {
				t.Fatalf("%s is assigned %q once stage %s is reached", m.ID, got, zone)
			}
			if a := e.ack(t, rel, m.ID, "boot-1", seq, rollout.HealthyAcked); !a.Counted {
				t.Fatalf("HEALTHY_ACKED of %s = %+v", m.ID, a)
			}
		}
	}
	st = e.status(t, 2)
	for _, res := range st.Stages {
		if res.Evaluation.Outcome != quorum.Passed {
			t.Fatalf("stage %s: %s (%s)", res.Name, res.Evaluation.Outcome, res.Evaluation.Reason)
		}
	}
	if total := st.Stages[1].Evaluation.Members + st.Stages[2].Evaluation.Members + st.Stages[3].Evaluation.Members + st.Stages[4].Evaluation.Members; total != 6 {
		t.Fatalf("the stages that apply count %d members; each of the 6 belongs to one", total)
	}
	if _, err := e.rollouts.Promote(ctx, rollout.Move{ConfigID: "routing", To: 2, ExpectedGeneration: 1, IdempotencyKey: "p2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.rollouts.Rollback(ctx, rollout.Move{ConfigID: "routing", ExpectedGeneration: 2, IdempotencyKey: "rb"}); err != nil {
		t.Fatal(err)
	}
	if got := e.assignments(t, canary); got != "1" {
		t.Fatalf("the canary after the rollback: %q", got)
	}
}

// TestAFractionCohortIsDrawnFromWhatItMayStillAssign: a fraction stage
// after a stage that took zone-a draws its cohort from the four others and
// sizes it against them: half of four is two, and its quorum counts those
// two. (Before the fix it drew from all six, sized against six, took only
// the drawn members outside zone-a, and counted all six.)
func TestAFractionCohortIsDrawnFromWhatItMayStillAssign(t *testing.T) {
	e := newEnv(t)
	rel := e.releaseWith(t, 50, func(s *release.Spec) {
		s.Stages = []release.Stage{
			{Name: "zone-a", Selector: map[string]string{"zone": "zone-a"}, Policy: quorum.Policy{Kind: quorum.All}},
			{Name: "half", Policy: quorum.Policy{Kind: quorum.Fraction, Fraction: 0.5}},
		}
	})
	var cohort []string
	for _, id := range []string{"i1", "i2", "i4", "i5"} {
		if got := e.assignments(t, id); got != "" {
			t.Fatalf("%s is assigned %q before the zone-a stage passed", id, got)
		}
	}
	for _, id := range []string{"i0", "i3"} {
		e.ack(t, rel, id, "boot-1", 1, rollout.HealthyAcked)
	}
	for _, id := range members() {
		switch got := e.assignments(t, id); {
		case got == "1:half":
			cohort = append(cohort, id)
		case got == "1:zone-a" && (id == "i0" || id == "i3"):
		case got != "":
			t.Fatalf("%s is assigned %q", id, got)
		}
	}
	sort.Strings(cohort)
	if len(cohort) != 2 || strings.Contains(strings.Join(cohort, " "), "i0") || strings.Contains(strings.Join(cohort, " "), "i3") {
		t.Fatalf("the half stage took %v; want two of i1, i2, i4, i5", cohort)
	}
	st := e.status(t, 1)
	if ev := st.Stages[1].Evaluation; ev.Members != 2 || ev.Outcome != quorum.Waiting {
		t.Fatalf("the half stage: %+v", ev)
	}
	// The fraction sized the cohort; the stage needs every member of it
	// (not the fraction again, of the cohort).
	e.ack(t, rel, cohort[0], "boot-1", 1, rollout.HealthyAcked)
	if ev := e.status(t, 1).Stages[1].Evaluation; ev.Outcome != quorum.Waiting {
		t.Fatalf("the half stage after one of its two members is healthy: %+v", ev)
	}
	e.ack(t, rel, cohort[1], "boot-1", 1, rollout.HealthyAcked)
	if ev := e.status(t, 1).Stages[1].Evaluation; ev.Outcome != quorum.Passed {
		t.Fatalf("the half stage after both its members are healthy: %+v", ev)
	}
}

// TestARejectionCountsOnlyAgainstTheStageThatAssignedIt: a canary cohort
// of three tolerates one rejection; the catch-all stage after it tolerates
// none. The canary's rejection counts against the canary stage only, so
// the rollout goes on and is promoted. (Before the fix every stage counted
// every member its selector matched: the catch-all counted the rejection
// and stopped the rollout before it was reached.)
func TestARejectionCountsOnlyAgainstTheStageThatAssignedIt(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	rel := e.releaseWith(t, 50, func(s *release.Spec) {
		s.Stages = []release.Stage{
			{Name: "canary", Policy: quorum.Policy{Kind: quorum.Fraction, Fraction: 0.5, MaxRejected: 1}},
			{Name: "rest", Policy: quorum.Policy{Kind: quorum.All}},
		}
	})
	cohort := rollout.Cohort(rel, 0)
	if len(cohort) != 3 {
		t.Fatalf("cohort %v; want half of six", cohort)
	}
	rejected := ""
	for _, id := range members() {
		if !cohort[id] {
			continue
		}
		state := rollout.HealthyAcked
		if rejected == "" {
			state, rejected = rollout.Rejected, id
		}
		if a := e.ack(t, rel, id, "boot-1", 1, state); !a.Counted {
			t.Fatalf("%s of canary %s = %+v", state, id, a)
		}
		if st := e.status(t, 1); st.Stop != nil {
			t.Fatalf("the canary's %s stopped the rollout: %s (stage %q)", state, st.Stop.Reason, st.Stop.Stage)
		}
	}
	// The canary tolerates the rejection (it waits; it does not fail), and
	// the catch-all, not reached, counts none of it.
	st := e.status(t, 1)
	if canary, rest := st.Stages[0].Evaluation, st.Stages[1].Evaluation; canary.Outcome != quorum.Waiting || canary.Rejected != 1 ||
		rest.Members != 3 || rest.Rejected != 0 || st.Stages[1].Reached {
		t.Fatalf("after the canary's reports: canary %+v, rest %+v", canary, rest)
	}
	// The canary that rejected applies again, healthy: its cohort is whole.
	e.ack(t, rel, rejected, "boot-1", 2, rollout.HealthyAcked)
	st = e.status(t, 1)
	if canary, rest := st.Stages[0].Evaluation, st.Stages[1].Evaluation; canary.Outcome != quorum.Passed ||
		rest.Members != 3 || rest.Rejected != 0 || !st.Stages[1].Reached {
		t.Fatalf("after the canary applied again: canary %+v, rest %+v", canary, rest)
	}
	for _, id := range members() {
		if !cohort[id] {
			e.ack(t, rel, id, "boot-1", 1, rollout.HealthyAcked)
		}
	}
	if _, err := e.rollouts.Promote(ctx, rollout.Move{ConfigID: "routing", To: 1, IdempotencyKey: "p1"}); err != nil {
		t.Fatal(err)
	}
}

// TestTheReadmesPlanRunsAsWritten: the README's example plan (a shadow
// stage on zone-a, a 1% canary with a health budget, zone-a, zone-b, and
// the rest by zone quorum) is created, runs stage by stage and is
// promoted. Before the fix the shadow stage took zone-a away from the
// zone-a stage, which then had no members and stopped the rollout.
func TestTheReadmesPlanRunsAsWritten(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	maxErrors := 0.01
	rel := e.releaseWith(t, 50, func(s *release.Spec) {
		s.Stages = []release.Stage{
			{Name: "mirror", Selector: map[string]string{"zone": "zone-a"}, Shadow: true, Policy: quorum.Policy{Kind: quorum.All}},
			{Name: "canary", Policy: quorum.Policy{Kind: quorum.Fraction, Fraction: 0.01},
				Budget: &release.Budget{MaxErrorRate: &maxErrors, MaxP99: 250 * time.Millisecond}},
			{Name: "zone-a", Selector: map[string]string{"zone": "zone-a"}, Policy: quorum.Policy{Kind: quorum.All}},
			{Name: "zone-b", Selector: map[string]string{"zone": "zone-b"}, Policy: quorum.Policy{Kind: quorum.All}},
			{Name: "rest", Policy: quorum.Policy{Kind: quorum.ZoneQuorum, Fraction: 0.9}},
		}
	})
	measured := func(a *rollout.Ack) { a.Health = &rollout.Health{ErrorRate: 0.001, P99: 100 * time.Millisecond} }
	// Every instance reports as soon as it is assigned to apply, until all
	// are healthy; zone-a validates first.
	for _, id := range []string{"i0", "i3"} {
		if a := e.ack(t, rel, id, "boot-1", 1, rollout.Validated); !a.Counted {
			t.Fatalf("VALIDATED of %s = %+v", id, a)
		}
	}
	healthy := map[string]bool{}
	for round := 0; len(healthy) < 6; round++ {
		if round > len(rel.Stages) {
			st := e.status(t, 1)
			t.Fatalf("the rollout is stuck with %v healthy: %+v, stop %+v", healthy, st.Stages, st.Stop)
		}
		for _, id := range members() {
			if got := e.assignments(t, id); !healthy[id] && strings.HasPrefix(got, "1:") {
				if a := e.ack(t, rel, id, "boot-1", 2, rollout.HealthyAcked, measured); !a.Counted {
					t.Fatalf("HEALTHY_ACKED of %s (%s) = %+v", id, got, a)
				}
				healthy[id] = true
			}
		}
	}
	if _, err := e.rollouts.Promote(ctx, rollout.Move{ConfigID: "routing", To: 1, IdempotencyKey: "p1"}); err != nil {
		t.Fatal(err)
	}
}

// TestAPlanWithAStageOfNoMembersIsRefused: a stage that would assign the
// release to nobody (every member it matches taken by earlier stages, or
// none matching) is refused at creation, naming the stage; nothing is
// written.
func TestAPlanWithAStageOfNoMembersIsRefused(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for name, stages := range map[string][]release.Stage{
		`stage "rest" would assign the release to no instance: the 6 frozen members its selector matches are all taken by earlier stages (everyone)`: {
			{Name: "everyone", Policy: quorum.Policy{Kind: quorum.All}},
			{Name: "rest", Policy: quorum.Policy{Kind: quorum.ZoneQuorum, Fraction: 1}},
		},
		`stage "zone-d" would assign the release to no instance: none of the 6 frozen members matches its selector {zone=zone-d}`: {
			{Name: "validate", Shadow: true, Policy: quorum.Policy{Kind: quorum.All}},
			{Name: "zone-d", Selector: map[string]string{"zone": "zone-d"}, Policy: quorum.Policy{Kind: quorum.All}},
		},
	} {
		_, err := e.releases.Create(ctx, release.Spec{ConfigID: "routing", MediaType: "application/json", ValidatorDigest: e.digest,
			Deadline: time.Hour, Content: []byte(`{"upstreams":[{"host":"a","weight":100}]}`), Stages: stages}, "ci")
		if !errors.Is(err, release.ErrInvalid) || !strings.Contains(err.Error(), name) {
			t.Fatalf("plan %+v = %v; want %q", stages, err, name)
		}
	}
	if head, err := e.releases.HeadAt(ctx, "routing", 0); err != nil || head != 0 {
		t.Fatalf("head after refusals = %d, %v", head, err)
	}
}

// TestAShadowOnlyMemberShowsItsHealthInItsShadowStage: zone-a validates in
// a shadow stage and no stage that applies takes it; it gets the release at
// promotion, and a rejection after that shows in the shadow stage, the one
// stage that counts it.
func TestAShadowOnlyMemberShowsItsHealthInItsShadowStage(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	rel := e.releaseWith(t, 50, func(s *release.Spec) {
		s.Stages = []release.Stage{
			{Name: "mirror", Selector: map[string]string{"zone": "zone-a"}, Shadow: true, Policy: quorum.Policy{Kind: quorum.All, MaxRejected: 1}},
			{Name: "zone-b", Selector: map[string]string{"zone": "zone-b"}, Policy: quorum.Policy{Kind: quorum.All}},
		}
		// Before promotion only zone-b runs the release (2 of 6), and no
		// member runs an earlier one: the coverage gate is lowered to them.
		cov := 0.3
		s.MinCoverage = &cov
	})
	for _, id := range []string{"i0", "i3"} {
		e.ack(t, rel, id, "boot-1", 1, rollout.Validated)
	}
	for _, id := range []string{"i1", "i4"} {
		e.ack(t, rel, id, "boot-1", 1, rollout.HealthyAcked)
	}
	if _, err := e.rollouts.Promote(ctx, rollout.Move{ConfigID: "routing", To: 1, IdempotencyKey: "p1"}); err != nil {
		t.Fatal(err)
	}
	if a := e.ack(t, rel, "i0", "boot-1", 2, rollout.Rejected); !a.Counted || a.Shadow {
		t.Fatalf("REJECTED of i0 after promotion = %+v", a)
	}
	st := e.status(t, 1)
	if mirror := st.Stages[0]; mirror.Evaluation.Rejected != 1 || mirror.States["REJECTED"] != 1 || mirror.States["VALIDATED"] != 1 {
		t.Fatalf("the mirror stage after i0 rejected the active release: %+v %v", mirror.Evaluation, mirror.States)
	}
}

// TestAStageNotReachedNeverStopsTheRollout: retiring both zone-b members
// empties the zone-b stage, which cannot pass; while the canary stage
// before it waits, the rollout goes on. It stops, naming zone-b, only once
// zone-b is reached. (Before the fix the retirement stopped it at once.)
func TestAStageNotReachedNeverStopsTheRollout(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	rel := e.releaseWith(t, 50, func(s *release.Spec) {
		s.Stages = []release.Stage{
			{Name: "canary", Selector: map[string]string{"zone": "zone-a"}, Policy: quorum.Policy{Kind: quorum.All}},
			{Name: "zone-b", Selector: map[string]string{"zone": "zone-b"}, Policy: quorum.Policy{Kind: quorum.All}},
		}
	})
	for _, id := range []string{"i1", "i4"} {
		if _, err := e.rollouts.Retire(ctx, "routing", 1, id, "decommissioned", "oncall"); err != nil {
			t.Fatal(err)
		}
	}
	st := e.status(t, 1)
	if st.Stop != nil || st.Stages[1].Reached || st.Stages[1].Evaluation.Outcome != quorum.Failed {
		t.Fatalf("with zone-b emptied before it is reached: stop %+v, stages %+v", st.Stop, st.Stages)
	}
	if a := e.ack(t, rel, "i0", "boot-1", 1, rollout.HealthyAcked); !a.Counted {
		t.Fatalf("canary ACK = %+v", a)
	}
	if st := e.status(t, 1); st.Stop != nil {
		t.Fatalf("one canary of two healthy: the rollout stopped: %+v", st.Stop)
	}
	e.ack(t, rel, "i3", "boot-1", 1, rollout.HealthyAcked)
	if stop := e.status(t, 1).Stop; stop == nil || stop.Stage != "zone-b" || !strings.Contains(stop.Reason, "the frozen membership is empty") {
		t.Fatalf("once zone-b is reached: stop %+v", stop)
	}
}
