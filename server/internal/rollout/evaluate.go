package rollout

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"sort"
	"time"

	"github.com/pawlcfg/pawl/server/internal/instance"
	"github.com/pawlcfg/pawl/server/internal/quorum"
	"github.com/pawlcfg/pawl/server/internal/release"
)

// plan is a release's stage plan laid over its unretired frozen
// membership: which stage takes each member (sends it the release), and
// which members each stage's quorum counts.
type plan struct {
	rel release.Release
	// members are the unretired frozen members, by identity.
	members map[string]quorum.Member
	// takenBy is the index of the stage that takes each member; a member
	// no stage takes gets the release only once it is promoted.
	takenBy map[string]int
	// counted are, per stage, the members its quorum counts: the
	// unretired members its selector matches, less those a shadow stage
	// takes when the stage is not itself a shadow (they never apply before
	// promotion).
	counted [][]quorum.Member
	// retired counts, per stage, the retired members its selector matches.
	retired []int
}

// newPlan lays rel's stages over its membership less the retired members.
// A stage takes the members its selector matches that no earlier stage
// took; a fraction stage takes only its cohort (see cohort).
func newPlan(rel release.Release, retired map[string]Retirement) plan {
	p := plan{rel: rel, members: map[string]quorum.Member{}, takenBy: map[string]int{},
		counted: make([][]quorum.Member, len(rel.Stages)), retired: make([]int, len(rel.Stages))}
	for _, m := range rel.Membership {
		if _, gone := retired[m.ID]; !gone {
			p.members[m.ID] = m
		}
	}
	for i, st := range rel.Stages {
		var takes map[string]bool
		if st.Policy.Kind == quorum.Fraction {
			takes = cohort(rel, i, retired)
		}
		for _, m := range rel.Membership {
			if _, taken := p.takenBy[m.ID]; taken || !instance.Matches(m, st.Selector) {
				continue
			}
			if _, gone := retired[m.ID]; gone || (takes != nil && !takes[m.ID]) {
				continue
			}
			p.takenBy[m.ID] = i
		}
	}
	for i, st := range rel.Stages {
		for _, m := range rel.Membership {
			if !instance.Matches(m, st.Selector) {
				continue
			}
			if _, gone := retired[m.ID]; gone {
				p.retired[i]++
				continue
			}
			if j, ok := p.takenBy[m.ID]; ok && !st.Shadow && rel.Stages[j].Shadow {
				continue
			}
			p.counted[i] = append(p.counted[i], m)
		}
	}
	return p
}

// stageOf is the stage whose budget and shadow mode apply to a member: the
// one that takes it, else the first whose selector matches it (-1: none).
func (p plan) stageOf(id string) int {
	if i, ok := p.takenBy[id]; ok {
		return i
	}
	m, ok := p.members[id]
	if !ok {
		return -1
	}
	for i, st := range p.rel.Stages {
		if instance.Matches(m, st.Selector) {
			return i
		}
	}
	return -1
}

// Cohort is the members a fraction stage sends the release to when no
// member is retired; see cohort.
func Cohort(rel release.Release, stage int) map[string]bool { return cohort(rel, stage, nil) }

// cohort is the members a fraction stage sends the release to: of the
// unretired members its selector matches, ranked by a hash of config,
// generation and identity, the first k, where k is the fraction (rounded
// up) of every frozen member it matches. Each release picks its own
// canaries and every server picks the same ones. Retiring a cohort member
// brings in the next in rank, and retiring any other changes nothing, so
// a cohort only ever grows: no instance loses an assignment to a
// retirement.
func cohort(rel release.Release, stage int, retired map[string]Retirement) map[string]bool {
	st := rel.Stages[stage]
	type ranked struct {
		id   string
		rank [sha256.Size]byte
	}
	var matching []ranked
	frozen := 0
	for _, m := range rel.Membership {
		if !instance.Matches(m, st.Selector) {
			continue
		}
		frozen++
		if _, gone := retired[m.ID]; !gone {
			matching = append(matching, ranked{m.ID, sha256.Sum256([]byte(fmt.Sprintf("%s\x00%d\x00%s", rel.ConfigID, rel.Generation, m.ID)))})
		}
	}
	sort.Slice(matching, func(i, j int) bool { return bytes.Compare(matching[i].rank[:], matching[j].rank[:]) < 0 })
	n := min(len(matching), quorum.AtLeast(st.Policy.Fraction, frozen))
	out := make(map[string]bool, n)
	for _, m := range matching[:n] {
		out[m.id] = true
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
	// NO_ACK for none; overall and per zone.
	States     map[string]int
	ZoneStates map[string]map[string]int
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
