package quorum

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// reference is Evaluate as it was written before Tally: a pass over the
// whole membership. The property below holds the tally to it.
func reference(p Policy, membership []Member, states map[string]State) Evaluation {
	ev := Evaluation{Zones: map[string]ZoneTally{}}
	if err := p.Validate(); err != nil {
		ev.Outcome, ev.Reason = Failed, err.Error()
		return ev
	}
	roleMembers, roleHealthy := 0, 0
	for _, m := range membership {
		st := states[m.ID]
		z := ev.Zones[m.Zone]
		z.Members++
		ev.Members++
		ev.TotalWeight += m.Weight
		switch st {
		case Healthy:
			z.Healthy++
			ev.Healthy++
			ev.HealthyWeight += m.Weight
		case Rejected:
			z.Rejected++
			ev.Rejected++
		}
		if m.Role == p.Role {
			roleMembers++
			if st == Healthy {
				roleHealthy++
			}
		}
		ev.Zones[m.Zone] = z
	}
	if ev.Members == 0 {
		ev.Outcome, ev.Reason = Failed, "the frozen membership is empty: no instance can acknowledge"
		return ev
	}
	if ev.Rejected > p.MaxRejected {
		ev.Outcome = Failed
		ev.Reason = fmt.Sprintf("%s rejected; the stage tolerates %d", countOf(ev.Rejected, "member", "members"), p.MaxRejected)
		return ev
	}
	switch p.Kind {
	case All:
		ev.decide(ev.Healthy == ev.Members, fmt.Sprintf("%d of %d members healthy; all are needed", ev.Healthy, ev.Members))
	case Fraction:
		need := AtLeast(p.Fraction, ev.Members)
		ev.decide(ev.Healthy >= need, fmt.Sprintf("%d of %d members healthy; %s needed", ev.Healthy, ev.Members, countOf(need, "is", "are")))
	case ZoneQuorum:
		var short []string
		for name, z := range ev.Zones {
			z.Needed = AtLeast(p.Fraction, z.Members)
			ev.Zones[name] = z
			if z.Healthy < z.Needed {
				short = append(short, fmt.Sprintf("zone %q has %d of %d healthy, needs %d", name, z.Healthy, z.Members, z.Needed))
			}
		}
		sort.Strings(short)
		reason := fmt.Sprintf("every zone has its quorum (%d zones)", len(ev.Zones))
		if len(short) > 0 {
			reason = strings.Join(short, "; ")
		}
		ev.decide(len(short) == 0, reason)
	case CriticalRole:
		if roleMembers == 0 {
			ev.Outcome, ev.Reason = Failed, fmt.Sprintf("no member has the critical role %q", p.Role)
			return ev
		}
		ev.decide(roleHealthy == roleMembers, fmt.Sprintf("%d of %d %q members healthy; all are needed", roleHealthy, roleMembers, p.Role))
	case TrafficWeight:
		if ev.TotalWeight <= 0 {
			ev.Outcome, ev.Reason = Failed, "the membership carries no traffic weight"
			return ev
		}
		need := p.Fraction * ev.TotalWeight
		ev.decide(ev.HealthyWeight >= need-1e-9*ev.TotalWeight,
			fmt.Sprintf("healthy members carry %.4g of %.4g traffic weight; %.4g is needed", ev.HealthyWeight, ev.TotalWeight, need))
	}
	return ev
}

// TestATallyAgreesWithAFullEvaluation moves random members through random
// states, one at a time, and after every move compares the tally's verdict
// and evidence with a full pass over the membership.
func TestATallyAgreesWithAFullEvaluation(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := genPolicy(t)
		ms, _ := genFleet(t)
		states := map[string]State{}
		tally := NewTally(p, ms)
		check := func(step int) {
			got, want := tally.Evaluate(), reference(p, ms, states)
			if got.Outcome != want.Outcome || got.Members != want.Members || got.Healthy != want.Healthy || got.Rejected != want.Rejected ||
				fmt.Sprint(got.Zones) != fmt.Sprint(want.Zones) || math.Abs(got.HealthyWeight-want.HealthyWeight) > 1e-9 ||
				got.TotalWeight != want.TotalWeight || (p.Kind != TrafficWeight && got.Reason != want.Reason) {
				t.Fatalf("step %d: tally %+v, full evaluation %+v", step, got, want)
			}
		}
		check(0)
		if len(ms) == 0 {
			return
		}
		for step := range rapid.IntRange(1, 60).Draw(t, "moves") {
			m := ms[rapid.IntRange(0, len(ms)-1).Draw(t, "who")]
			to := genState(t)
			tally.Move(m, states[m.ID], to)
			states[m.ID] = to
			check(step + 1)
		}
		// A member outside the membership moves nothing.
		tally.Move(Member{ID: "stranger", Zone: "z"}, Pending, Healthy)
		check(-1)
	})
}
