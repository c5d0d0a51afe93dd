package quorum

import (
	"fmt"
	"sort"
	"strings"
)

// Tally is a stage's evaluation kept up to date one member at a time: a
// member that moves from one state to another updates a few counters, and
// Evaluate gives what Evaluate of the whole membership would, in time
// proportional to the number of zones, not of members. A rollout of
// thousands of instances re-evaluates its stages after every ACK this way.
//
// A Tally is not safe for concurrent use.
type Tally struct {
	policy                     Policy
	invalid                    error
	members, healthy, rejected int
	totalWeight, healthyWeight float64
	zones                      map[string]*ZoneTally
	roleMembers, roleHealthy   int
}

// NewTally returns the tally of p over the membership, every member
// pending.
func NewTally(p Policy, membership []Member) *Tally {
	t := &Tally{policy: p, invalid: p.Validate(), zones: map[string]*ZoneTally{}}
	for _, m := range membership {
		z := t.zones[m.Zone]
		if z == nil {
			z = &ZoneTally{}
			t.zones[m.Zone] = z
		}
		z.Members++
		t.members++
		t.totalWeight += m.Weight
		if m.Role == p.Role {
			t.roleMembers++
		}
	}
	return t
}

// Move records that member m, counted by the tally, went from one state to
// another.
func (t *Tally) Move(m Member, from, to State) {
	if from == to {
		return
	}
	t.count(m, from, -1)
	t.count(m, to, +1)
}

func (t *Tally) count(m Member, st State, n int) {
	z := t.zones[m.Zone]
	if z == nil {
		return // not a member
	}
	switch st {
	case Healthy:
		z.Healthy += n
		t.healthy += n
		t.healthyWeight += float64(n) * m.Weight
		if m.Role == t.policy.Role {
			t.roleHealthy += n
		}
	case Rejected:
		z.Rejected += n
		t.rejected += n
	}
}

// Evaluate is the stage's verdict with its evidence, as Evaluate of the
// membership in its current states would give.
func (t *Tally) Evaluate() Evaluation {
	p := t.policy
	ev := Evaluation{Zones: map[string]ZoneTally{}}
	if t.invalid != nil {
		ev.Outcome, ev.Reason = Failed, t.invalid.Error()
		return ev
	}
	ev.Members, ev.Healthy, ev.Rejected = t.members, t.healthy, t.rejected
	ev.TotalWeight, ev.HealthyWeight = t.totalWeight, t.healthyWeight
	for name, z := range t.zones {
		ev.Zones[name] = *z
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
		if t.roleMembers == 0 {
			ev.Outcome, ev.Reason = Failed, fmt.Sprintf("no member has the critical role %q", p.Role)
			return ev
		}
		ev.decide(t.roleHealthy == t.roleMembers, fmt.Sprintf("%d of %d %q members healthy; all are needed", t.roleHealthy, t.roleMembers, p.Role))
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

// countOf writes n followed by the word for one or for many: "1 member",
// "3 members", "1 is", "3 are".
func countOf(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}
