package quorum

import (
	"fmt"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func fleet() []Member {
	var ms []Member
	for i, zone := range []string{"a", "a", "a", "b", "b", "b", "c", "c", "c", "c"} {
		role := "worker"
		if i%5 == 0 {
			role = "primary"
		}
		ms = append(ms, Member{ID: fmt.Sprintf("i%d", i), Zone: zone, Role: role, Weight: float64(i + 1)})
	}
	return ms
}

func healthy(ids ...int) map[string]State {
	st := map[string]State{}
	for _, i := range ids {
		st[fmt.Sprintf("i%d", i)] = Healthy
	}
	return st
}

func TestEvaluate(t *testing.T) {
	ms := fleet() // zones a: i0-i2, b: i3-i5, c: i6-i9; primaries i0, i5; weights 1..10 (55)
	withRejects := healthy(0, 1, 2, 3, 4, 5, 6, 7, 8)
	withRejects["i9"] = Rejected
	cases := []struct {
		name   string
		p      Policy
		states map[string]State
		want   Outcome
		reason string
	}{
		{"all waiting", Policy{Kind: All}, healthy(0, 1, 2, 3, 4, 5, 6, 7, 8), Waiting, "9 of 10 members healthy"},
		{"all passed", Policy{Kind: All}, healthy(0, 1, 2, 3, 4, 5, 6, 7, 8, 9), Passed, ""},
		{"fraction exact", Policy{Kind: Fraction, Fraction: 0.3}, healthy(0, 5, 9), Passed, ""},
		{"fraction short", Policy{Kind: Fraction, Fraction: 0.3}, healthy(0, 5), Waiting, "3 are needed"},
		{"zone quorum, zone c short", Policy{Kind: ZoneQuorum, Fraction: 0.5}, healthy(0, 1, 3, 4, 6), Waiting, `zone "c" has 1 of 4 healthy, needs 2`},
		{"zone quorum passed", Policy{Kind: ZoneQuorum, Fraction: 0.5}, healthy(0, 1, 3, 4, 6, 7), Passed, ""},
		{"critical role waiting", Policy{Kind: CriticalRole, Role: "primary"}, healthy(0, 1, 2), Waiting, `1 of 2 "primary" members healthy`},
		{"critical role passed", Policy{Kind: CriticalRole, Role: "primary"}, healthy(0, 5), Passed, ""},
		{"critical role absent", Policy{Kind: CriticalRole, Role: "db"}, healthy(0, 5), Failed, `no member has the critical role "db"`},
		{"traffic weight passed", Policy{Kind: TrafficWeight, Fraction: 0.5}, healthy(9, 8, 7, 6), Passed, ""},
		{"traffic weight short", Policy{Kind: TrafficWeight, Fraction: 0.5}, healthy(9, 8), Waiting, "19 of 55"},
		{"a rejection over the threshold", Policy{Kind: Fraction, Fraction: 0.5}, withRejects, Failed, "1 member rejected; the stage tolerates 0"},
		{"one member needed", Policy{Kind: Fraction, Fraction: 0.1}, healthy(), Waiting, "0 of 10 members healthy; 1 is needed"},
		{"two zones short, in words", Policy{Kind: ZoneQuorum, Fraction: 0.5}, healthy(0, 1), Waiting,
			`zone "b" has 0 of 3 healthy, needs 2; zone "c" has 0 of 4 healthy, needs 2`},
		{"a rejection within the threshold", Policy{Kind: Fraction, Fraction: 0.5, MaxRejected: 1}, withRejects, Passed, ""},
		{"bad policy", Policy{Kind: Fraction, Fraction: 1.5}, healthy(), Failed, "fraction in (0, 1]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev := Evaluate(c.p, ms, c.states)
			if ev.Outcome != c.want || !strings.Contains(ev.Reason, c.reason) {
				t.Fatalf("Evaluate = %v (%s); want %v saying %q", ev.Outcome, ev.Reason, c.want, c.reason)
			}
		})
	}
	if ev := Evaluate(Policy{Kind: All}, nil, nil); ev.Outcome != Failed {
		t.Fatalf("empty membership = %v", ev.Outcome)
	}
}

// Generators for the properties.

func genPolicy(t *rapid.T) Policy {
	p := Policy{
		Kind:        Kind(rapid.IntRange(int(All), int(TrafficWeight)).Draw(t, "kind")),
		Fraction:    float64(rapid.IntRange(1, 100).Draw(t, "percent")) / 100,
		Role:        rapid.SampledFrom([]string{"primary", "worker", "db"}).Draw(t, "role"),
		MaxRejected: rapid.IntRange(0, 3).Draw(t, "maxRejected"),
	}
	return p
}

func genMember(t *rapid.T, id string) Member {
	return Member{
		ID:     id,
		Zone:   rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "zone"),
		Role:   rapid.SampledFrom([]string{"primary", "worker"}).Draw(t, "memberRole"),
		Weight: float64(rapid.IntRange(0, 10).Draw(t, "weight")),
	}
}

func genState(t *rapid.T) State {
	return State(rapid.IntRange(int(Pending), int(Rejected)).Draw(t, "state"))
}

func genFleet(t *rapid.T) ([]Member, map[string]State) {
	n := rapid.IntRange(0, 30).Draw(t, "members")
	var ms []Member
	states := map[string]State{}
	for i := range n {
		id := fmt.Sprintf("m%d", i)
		ms = append(ms, genMember(t, id))
		states[id] = genState(t)
	}
	return ms, states
}

// TestLateJoinersChangeNothing: instances that register after the freeze,
// whatever they report, never change the outcome or the evidence.
func TestLateJoinersChangeNothing(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := genPolicy(t)
		ms, states := genFleet(t)
		before := Evaluate(p, ms, states)
		late := rapid.IntRange(1, 30).Draw(t, "late")
		for i := range late {
			states[fmt.Sprintf("late%d", i)] = genState(t)
		}
		after := Evaluate(p, ms, states)
		if after.Outcome != before.Outcome || after.Reason != before.Reason || after.Healthy != before.Healthy ||
			after.Rejected != before.Rejected || after.Members != before.Members {
			t.Fatalf("late joiners changed %v (%s) into %v (%s)", before.Outcome, before.Reason, after.Outcome, after.Reason)
		}
	})
}

// TestRemovingAnAckNeverTurnsFailIntoPass: taking back a healthy ACK never
// makes a stage pass that did not pass, and a passing stage that loses one
// at most stops passing; adding a rejection never makes a stage pass.
func TestRemovingAnAckNeverTurnsFailIntoPass(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := genPolicy(t)
		ms, states := genFleet(t)
		if len(ms) == 0 {
			return
		}
		before := Evaluate(p, ms, states)
		id := ms[rapid.IntRange(0, len(ms)-1).Draw(t, "who")].ID
		was := states[id]
		to := rapid.SampledFrom([]State{Pending, Rejected}).Draw(t, "to")
		if was != Healthy && !(was == Pending && to == Rejected) {
			return // only removals of a healthy ACK, or a new rejection
		}
		states[id] = to
		after := Evaluate(p, ms, states)
		if before.Outcome != Passed && after.Outcome == Passed {
			t.Fatalf("%s: %v -> %v turned %v (%s) into a pass (%s)", id, was, to, before.Outcome, before.Reason, after.Reason)
		}
		if before.Outcome == Failed && after.Outcome != Failed {
			t.Fatalf("%s: %v -> %v turned a failure (%s) into %v (%s)", id, was, to, before.Reason, after.Outcome, after.Reason)
		}
	})
}

// TestPassIsMonotoneInHealthyAcks: a stage that passes keeps passing when
// one more member becomes healthy (unless that member had rejected: a
// rejection that is replaced by health only lowers the rejected count).
func TestPassIsMonotoneInHealthyAcks(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := genPolicy(t)
		ms, states := genFleet(t)
		if len(ms) == 0 {
			return
		}
		before := Evaluate(p, ms, states)
		id := ms[rapid.IntRange(0, len(ms)-1).Draw(t, "who")].ID
		states[id] = Healthy
		if after := Evaluate(p, ms, states); before.Outcome == Passed && after.Outcome != Passed {
			t.Fatalf("a new healthy ACK from %s turned a pass into %v (%s)", id, after.Outcome, after.Reason)
		}
	})
}
