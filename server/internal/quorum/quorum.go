// Package quorum evaluates a rollout stage's ACK policy against the
// membership frozen in its release.
//
// Evaluate is a pure function of the policy, the frozen membership and the
// latest ACK state of each instance. It counts only members: an instance
// that registered after the freeze, or an ACK from anyone else, changes
// nothing, so late joiners never dilute the denominator. A stage passes when
// its policy holds with HEALTHY_ACKED members; it fails when more members
// have rejected than the policy tolerates. Deadlines and health windows are
// the caller's: it evaluates at the right moments and keeps a failure once
// recorded.
package quorum

import (
	"encoding/json"
	"fmt"
	"math"
)

// Kind is the shape of an ACK policy.
type Kind int

const (
	// All needs every member healthy.
	All Kind = iota + 1
	// Fraction needs at least ceil(Fraction x members) healthy members.
	Fraction
	// ZoneQuorum needs, in every zone (fault domain) of the membership, at
	// least ceil(Fraction x the zone's members) healthy members.
	ZoneQuorum
	// CriticalRole needs every member with Role healthy; a membership with no
	// such member fails, since the policy can then mean nothing.
	CriticalRole
	// TrafficWeight needs healthy members carrying at least Fraction of the
	// membership's total traffic weight.
	TrafficWeight
)

// kindNames are the kinds' names, as stored and as the CLI writes them.
var kindNames = map[Kind]string{All: "all", Fraction: "fraction", ZoneQuorum: "zone-quorum", CriticalRole: "critical-role", TrafficWeight: "traffic-weight"}

// MarshalJSON stores the kind by name, so that records never depend on the
// order of the constants.
func (k Kind) MarshalJSON() ([]byte, error) {
	name, ok := kindNames[k]
	if !ok {
		return nil, fmt.Errorf("quorum: cannot store unknown policy kind %d", int(k))
	}
	return json.Marshal(name)
}

// UnmarshalJSON reads a kind by name (or, from records written before
// names, by number).
func (k *Kind) UnmarshalJSON(b []byte) error {
	var name string
	if err := json.Unmarshal(b, &name); err != nil {
		var n int
		if nerr := json.Unmarshal(b, &n); nerr != nil {
			return fmt.Errorf("quorum: policy kind %s is neither a name nor a number", b)
		}
		*k = Kind(n)
		return nil
	}
	for kind, n := range kindNames {
		if n == name {
			*k = kind
			return nil
		}
	}
	return fmt.Errorf("quorum: unknown policy kind %q", name)
}

// String names the kind as the API does.
func (k Kind) String() string {
	if name, ok := kindNames[k]; ok {
		return name
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Policy is one stage's ACK policy.
type Policy struct {
	// Kind is the shape of the policy.
	Kind Kind `json:"kind"`
	// Fraction, in (0, 1], is the share Fraction, ZoneQuorum and
	// TrafficWeight need.
	Fraction float64 `json:"fraction,omitempty"`
	// Role is the critical role CriticalRole needs.
	Role string `json:"role,omitempty"`
	// MaxRejected is how many rejecting members the stage tolerates; one
	// more fails it.
	MaxRejected int `json:"max_rejected,omitempty"`
}

// Validate reports a policy that cannot be evaluated.
func (p Policy) Validate() error {
	switch p.Kind {
	case All:
	case Fraction, ZoneQuorum, TrafficWeight:
		if !(p.Fraction > 0 && p.Fraction <= 1) {
			return fmt.Errorf("quorum: %s policy needs a fraction in (0, 1], not %v", p.Kind, p.Fraction)
		}
	case CriticalRole:
		if p.Role == "" {
			return fmt.Errorf("quorum: critical-role policy needs a role")
		}
	default:
		return fmt.Errorf("quorum: unknown policy kind %d", p.Kind)
	}
	if p.MaxRejected < 0 {
		return fmt.Errorf("quorum: max rejected is %d; it must be 0 or more", p.MaxRejected)
	}
	return nil
}

// Member is one instance of the frozen membership.
type Member struct {
	// ID is the workload identity.
	ID string `json:"id"`
	// Zone is the fault domain.
	Zone string `json:"zone"`
	// Role is the instance's role.
	Role string `json:"role,omitempty"`
	// Weight is the instance's traffic weight (0 or more).
	Weight float64 `json:"weight"`
	// Labels are the instance's labels, for stage selectors.
	Labels map[string]string `json:"labels,omitempty"`
	// AppVersion is the application version it registered with.
	AppVersion string `json:"app_version,omitempty"`
	// InstanceCredential says the registration was made with an instance
	// credential; a release that requires one freezes only such members.
	// Not stored: the membership is what passed.
	InstanceCredential bool `json:"-"`
}

// State is the latest state an instance reported for the release.
type State int

const (
	// Pending means no counting ACK yet (any state before HEALTHY_ACKED).
	Pending State = iota
	// Healthy means HEALTHY_ACKED after the health window.
	Healthy
	// Rejected means REJECTED.
	Rejected
)

// Outcome is a stage's verdict.
type Outcome int

const (
	// Waiting means the policy does not hold yet and has not failed.
	Waiting Outcome = iota
	// Passed means the policy holds.
	Passed
	// Failed means too many members rejected, or the policy cannot hold.
	Failed
)

var outcomeNames = [...]string{Waiting: "waiting", Passed: "passed", Failed: "failed"}

// String names the outcome.
func (o Outcome) String() string {
	if int(o) < 0 || int(o) >= len(outcomeNames) {
		return fmt.Sprintf("Outcome(%d)", int(o))
	}
	return outcomeNames[o]
}

// MarshalJSON stores the outcome by name.
func (o Outcome) MarshalJSON() ([]byte, error) {
	if int(o) < 0 || int(o) >= len(outcomeNames) {
		return nil, fmt.Errorf("quorum: cannot store unknown outcome %d", int(o))
	}
	return json.Marshal(outcomeNames[o])
}

// UnmarshalJSON reads an outcome by name (or, from records written before
// names, by number).
func (o *Outcome) UnmarshalJSON(b []byte) error {
	var name string
	if err := json.Unmarshal(b, &name); err != nil {
		var n int
		if nerr := json.Unmarshal(b, &n); nerr != nil {
			return fmt.Errorf("quorum: outcome %s is neither a name nor a number", b)
		}
		*o = Outcome(n)
		return nil
	}
	for i, n := range outcomeNames {
		if n == name {
			*o = Outcome(i)
			return nil
		}
	}
	return fmt.Errorf("quorum: unknown outcome %q", name)
}

// ZoneTally counts one zone's members.
type ZoneTally struct {
	// Members, Healthy and Rejected count the zone's members by state.
	Members  int `json:"members"`
	Healthy  int `json:"healthy"`
	Rejected int `json:"rejected"`
	// Needed is how many healthy members the zone needs (ZoneQuorum only).
	Needed int `json:"needed,omitempty"`
}

// Evaluation is the verdict with its evidence.
type Evaluation struct {
	// Outcome is the verdict.
	Outcome Outcome `json:"outcome"`
	// Reason says why, for people: what passed, or what is waited on.
	Reason string `json:"reason"`
	// Members, Healthy and Rejected count the membership by state.
	Members  int `json:"members"`
	Healthy  int `json:"healthy"`
	Rejected int `json:"rejected"`
	// HealthyWeight and TotalWeight are traffic weights.
	HealthyWeight float64 `json:"healthy_weight"`
	TotalWeight   float64 `json:"total_weight"`
	// Zones tallies each zone.
	Zones map[string]ZoneTally `json:"zones,omitempty"`
}

// Evaluate applies p to the frozen membership with the latest state of
// each instance. States of instances outside the membership are ignored.
// It is a Tally of the membership moved to the states, evaluated once.
func Evaluate(p Policy, membership []Member, states map[string]State) Evaluation {
	t := NewTally(p, membership)
	for _, m := range membership {
		if st := states[m.ID]; st != Pending {
			t.Move(m, Pending, st)
		}
	}
	return t.Evaluate()
}

func (ev *Evaluation) decide(ok bool, reason string) {
	ev.Reason = reason
	if ok {
		ev.Outcome = Passed
	}
}

// AtLeast is how many of n members a fraction f needs: ceil(f x n),
// computed so that f = k/n gives exactly k.
func AtLeast(f float64, n int) int {
	return int(math.Ceil(f*float64(n) - 1e-9))
}
