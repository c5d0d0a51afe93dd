package rollout

import (
	"time"

	"github.com/pawlcfg/pawl/server/internal/instance"
	"github.com/pawlcfg/pawl/server/internal/quorum"
	"github.com/pawlcfg/pawl/server/internal/release"
)

// plan is a release's stage plan laid over its unretired frozen
// membership (see release.Layout): the stage that assigns each member the
// release to apply, the shadow stage that assigns it the release to
// validate first, and the members each stage's quorum counts: exactly the
// members it assigns, so that a report counts against the stage that
// assigned the release, never against another whose selector matches.
type plan struct {
	rel release.Release
	// members are the unretired frozen members, by identity.
	members map[string]quorum.Member
	layout  release.Layout
	// counted are, per stage, the members its quorum counts: those it
	// assigns.
	counted [][]quorum.Member
	// retired counts, per stage, the retired members it would assign had
	// none retired.
	retired []int
}

// newPlan lays rel's stages over its membership less the retired members.
func newPlan(rel release.Release, retired map[string]Retirement) plan {
	gone := func(id string) bool { _, ok := retired[id]; return ok }
	p := plan{rel: rel, members: map[string]quorum.Member{}, layout: release.Lay(rel, gone), retired: make([]int, len(rel.Stages))}
	for _, m := range rel.Membership {
		if !gone(m.ID) {
			p.members[m.ID] = m
		}
	}
	p.counted = p.layout.Takes
	if len(retired) > 0 {
		for i, took := range release.Lay(rel, nil).Takes {
			for _, m := range took {
				if gone(m.ID) {
					p.retired[i]++
				}
			}
		}
	}
	return p
}

// applies is the stage that assigns id the release to apply (ok false:
// none before promotion).
func (p plan) applies(id string) (int, bool) {
	i, ok := p.layout.Applies[id]
	return i, ok
}

// shadows is the shadow stage that assigns id the release to validate
// (ok false: none).
func (p plan) shadows(id string) (int, bool) {
	i, ok := p.layout.Shadows[id]
	return i, ok
}

// stagesOf are the stages whose quorum counts id: its shadow stage and
// the stage that applies, those it has, in plan order.
func (p plan) stagesOf(id string) []int {
	var out []int
	if i, ok := p.shadows(id); ok {
		out = append(out, i)
	}
	if i, ok := p.applies(id); ok {
		out = append(out, i)
	}
	return out
}

// assignedBy is the stage through which a candidate's rollout, as far as
// progress reached, assigned the release to id: the stage that applies
// once it is reached, else its shadow stage once that is reached (shadow
// true). ok is false while neither is.
func (p plan) assignedBy(progress Progress, id string) (stage int, shadow, ok bool) {
	if i, has := p.applies(id); has && progress.reached(i) {
		return i, false, true
	}
	if i, has := p.shadows(id); has && progress.reached(i) {
		return i, true, true
	}
	return -1, false, false
}

// budgetStage is the stage whose health budget applies to id's reports of
// the release applied: the stage that applies it, else (a member that
// gets it only at promotion) the first stage that applies whose selector
// matches it (-1: none).
func (p plan) budgetStage(id string) int {
	if i, ok := p.applies(id); ok {
		return i
	}
	m, ok := p.members[id]
	if !ok {
		return -1
	}
	for i, st := range p.rel.Stages {
		if !st.Shadow && instance.Matches(m, st.Selector) {
			return i
		}
	}
	return -1
}

// Cohort is the members a stage assigns when no member is retired: for a
// fraction stage, its cohort.
func Cohort(rel release.Release, stage int) map[string]bool {
	out := map[string]bool{}
	for _, m := range release.Lay(rel, nil).Takes[stage] {
		out[m.ID] = true
	}
	return out
}

// failed reports whether a counted ACK is a failure: a rejection, or a
// healthy report whose health window failed or broke its stage's budget.
func failed(a Ack) bool {
	return a.State == Rejected || (a.State == HealthyAcked && (!a.HealthOK || a.Breach != ""))
}

// quorumState is what a member's latest counted ACK means to a stage's
// quorum: a shadow stage passes on VALIDATED (or anything after it), every
// other stage on HEALTHY_ACKED within its health window and budget.
func quorumState(a Ack, shadow bool) quorum.State {
	switch {
	case failed(a):
		return quorum.Rejected
	case a.State == HealthyAcked:
		return quorum.Healthy
	case shadow && stateRank[a.State] >= stateRank[Validated] && a.State != Stale:
		return quorum.Healthy
	}
	return quorum.Pending
}

// StageResult is one stage's evaluation.
type StageResult struct {
	Name   string
	Shadow bool
	// Reached says the stages before it passed, so its instances are
	// assigned the release; PassedAt is when it passed (zero: not yet).
	Reached  bool
	PassedAt time.Time
	// Retired counts the retired members its selector matches.
	Retired    int
	Evaluation quorum.Evaluation
	// States counts the stage's members by their display state: the
	// latest counted ACK's state, UNHEALTHY for a failed HEALTHY_ACKED,
	// STALE once the instance's assignment moved past this generation, and
	// NO_ACK for none; overall, per zone and per role.
	States     map[string]int
	ZoneStates map[string]map[string]int
	RoleStates map[string]map[string]int
}

// displayState is a member's state as status shows it.
func displayState(a Ack, ok, stale bool) string {
	switch {
	case !ok:
		return "NO_ACK"
	case stale:
		return string(Stale)
	case a.State == HealthyAcked && failed(a):
		return "UNHEALTHY"
	}
	return string(a.State)
}
