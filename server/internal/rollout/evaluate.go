package rollout

import (
	"iter"
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
//
// A plan holds no copy of a member and no map by identity: it finds a
// member by the release's index (release.MemberIndex) and keeps two bytes
// per member, the stages of its layout. The views keep a plan for the
// newest and the active release of every config, so this is what 10,000
// instances in 100 configs cost per release (see BenchmarkViewsMemory).
type plan struct {
	rel release.Release
	// gone are the retired members (replaced, never modified).
	gone   map[string]Retirement
	layout release.Layout
	// size counts the unretired members.
	size int
	// retired counts, per stage, the retired members it would assign had
	// none retired.
	retired []int
}

// newPlan lays rel's stages over its membership less the retired members.
func newPlan(rel release.Release, retired map[string]Retirement) plan {
	gone := func(id string) bool { _, ok := retired[id]; return ok }
	p := plan{rel: rel, gone: retired, layout: release.Lay(rel, gone), retired: make([]int, len(rel.Stages)), size: len(rel.Membership)}
	if len(retired) > 0 {
		for _, m := range rel.Membership {
			if gone(m.ID) {
				p.size--
			}
		}
		frozen := release.Lay(rel, nil)
		for i := range rel.Stages {
			for _, j := range frozen.Takes(i) {
				if gone(rel.Membership[j].ID) {
					p.retired[i]++
				}
			}
		}
	}
	return p
}

// position is member id's position in the membership (ok false: it is not
// an unretired member).
func (p plan) position(id string) (int, bool) {
	j, ok := p.rel.MemberIndex(id)
	if !ok {
		return -1, false
	}
	if _, gone := p.gone[id]; gone {
		return -1, false
	}
	return j, true
}

// member is the unretired member id (ok false: none).
func (p plan) member(id string) (quorum.Member, bool) {
	j, ok := p.position(id)
	if !ok {
		return quorum.Member{}, false
	}
	return *p.rel.Membership[j], true
}

// members are the unretired members, in membership order.
func (p plan) members() iter.Seq[*quorum.Member] {
	return func(yield func(*quorum.Member) bool) {
		for _, m := range p.rel.Membership {
			if _, gone := p.gone[m.ID]; gone {
				continue
			}
			if !yield(m) {
				return
			}
		}
	}
}

// counted are the members stage i's quorum counts: those it assigns, in
// membership order.
func (p plan) counted(i int) []quorum.Member {
	takes := p.layout.Takes(i)
	out := make([]quorum.Member, len(takes))
	for k, j := range takes {
		out[k] = *p.rel.Membership[j]
	}
	return out
}

// applies is the stage that assigns id the release to apply (ok false:
// none before promotion).
func (p plan) applies(id string) (int, bool) {
	return p.stage(p.layout.Applies, id)
}

// shadows is the shadow stage that assigns id the release to validate
// (ok false: none).
func (p plan) shadows(id string) (int, bool) {
	return p.stage(p.layout.Shadows, id)
}

// stage is id's stage in one of the layout's lists (a retired member is
// in none: the layout left it out).
func (p plan) stage(of []int8, id string) (int, bool) {
	j, ok := p.rel.MemberIndex(id)
	if !ok || of[j] < 0 {
		return -1, false
	}
	return int(of[j]), true
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
	m, ok := p.member(id)
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
	for _, j := range release.Lay(rel, nil).Takes(stage) {
		out[rel.Membership[j].ID] = true
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
