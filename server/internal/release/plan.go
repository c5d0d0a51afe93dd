package release

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"

	"github.com/pawlcfg/pawl/server/internal/instance"
	"github.com/pawlcfg/pawl/server/internal/quorum"
)

// Layout is a release's stage plan laid over its frozen membership: the
// stage that assigns each member the release to apply, and the shadow
// stage, if any, that assigns it the release to validate first.
//
// The stages that apply take members in plan order: each takes the
// members its selector matches that no earlier such stage took, and a
// fraction stage only its cohort. Shadow stages take nobody away from
// them: a shadow stage takes the members its selector matches (a fraction
// stage, its cohort of them) that no earlier shadow stage took and no
// earlier stage assigned to apply. So "validate everywhere, then 1%, then
// zone by zone" is a shadow stage of everyone followed by stages that
// apply, and every member has at most one shadow stage, always before the
// stage that applies.
type Layout struct {
	// Applies is, per member (by its position in the membership), the
	// index of the stage that assigns it the release to apply, or -1: such
	// a member gets the release only once the release is promoted.
	Applies []int8
	// Shadows is, per member, the index of the shadow stage that assigns
	// it the release to validate until the stage that applies is reached,
	// or -1.
	Shadows []int8
	// sizes are the fraction stages' cohort sizes.
	sizes []int
}

// none marks a member no stage of a kind takes (MaxStages fits an int8).
const none int8 = -1

// Takes are the members stage i assigns, by position, in membership
// order: the members its quorum counts.
func (l Layout) Takes(i int) []int {
	var out []int
	for j := range l.Applies {
		if int(l.Applies[j]) == i || int(l.Shadows[j]) == i {
			out = append(out, j)
		}
	}
	return out
}

// Lay lays rel's stages over its frozen membership less the members gone
// reports retired (nil: none). A fraction stage's cohort is, of the
// members it may still assign (those its selector matches that an earlier
// stage did not take), ranked by a hash of config, generation and
// identity, the first ceil(f x n), where n counts them as frozen, before
// any retirement. Retiring a member only ever removes members from the
// ranked lists, so a member in a cohort stays in it (or moves to an
// earlier stage that then takes it): no instance loses an assignment to a
// retirement, and a retired cohort member's place goes to the next in
// rank.
func Lay(rel Release, gone func(id string) bool) Layout {
	frozen := lay(rel, func(string) bool { return false }, nil)
	if gone == nil {
		return frozen
	}
	return lay(rel, gone, frozen.sizes)
}

// lay lays the stages over the members gone does not report; sizes are
// the cohort sizes (nil: ceil(f x n) of the members each may assign).
func lay(rel Release, gone func(string) bool, sizes []int) Layout {
	n := len(rel.Membership)
	l := Layout{Applies: make([]int8, n), Shadows: make([]int8, n), sizes: make([]int, len(rel.Stages))}
	for j := range n {
		l.Applies[j], l.Shadows[j] = none, none
	}
	// The stages that apply first: a shadow stage skips the members an
	// earlier one of them took.
	for i, st := range rel.Stages {
		if st.Shadow {
			continue
		}
		pool := l.pool(rel, i, gone, func(j int) bool { return l.Applies[j] != none })
		for _, j := range l.take(rel, i, pool, sizes) {
			l.Applies[j] = int8(i)
		}
	}
	for i, st := range rel.Stages {
		if !st.Shadow {
			continue
		}
		pool := l.pool(rel, i, gone, func(j int) bool {
			return l.Shadows[j] != none || (l.Applies[j] != none && int(l.Applies[j]) < i)
		})
		for _, j := range l.take(rel, i, pool, sizes) {
			l.Shadows[j] = int8(i)
		}
	}
	return l
}

// pool is the members stage i may still assign, by position: those its
// selector matches that are not gone and not taken.
func (l *Layout) pool(rel Release, i int, gone func(string) bool, taken func(int) bool) []int {
	var out []int
	for j, m := range rel.Membership {
		if instance.Matches(*m, rel.Stages[i].Selector) && !gone(m.ID) && !taken(j) {
			out = append(out, j)
		}
	}
	return out
}

// take is what stage i takes of its pool: all of it, or for a fraction
// stage its cohort.
func (l *Layout) take(rel Release, i int, pool []int, sizes []int) []int {
	st := rel.Stages[i]
	if st.Policy.Kind != quorum.Fraction {
		return pool
	}
	n := quorum.AtLeast(st.Policy.Fraction, len(pool))
	if sizes != nil {
		n = sizes[i]
	}
	l.sizes[i] = n
	type ranked struct {
		j    int
		rank [sha256.Size]byte
	}
	byRank := make([]ranked, len(pool))
	for k, j := range pool {
		byRank[k] = ranked{j, sha256.Sum256([]byte(fmt.Sprintf("%s\x00%d\x00%s", rel.ConfigID, rel.Generation, rel.Membership[j].ID)))}
	}
	slices.SortFunc(byRank, func(a, b ranked) int { return bytes.Compare(a.rank[:], b.rank[:]) })
	out := make([]int, 0, min(n, len(byRank)))
	for _, r := range byRank[:min(n, len(byRank))] {
		out = append(out, r.j)
	}
	return out
}

// checkLayout refuses a plan that leaves a stage without members: a
// stage nobody is assigned through could never pass, and the rollout
// would wait on it until its deadline. A release with no member at all is
// left alone: there is nothing to lay out.
func checkLayout(rel Release) error {
	if len(rel.Membership) == 0 {
		return nil
	}
	l := Lay(rel, nil)
	for i, st := range rel.Stages {
		if len(l.Takes(i)) > 0 {
			continue
		}
		return fmt.Errorf("%w: stage %q would assign the release to no instance: %s; change its selector or policy, or drop it", ErrInvalid, st.Name, l.whyEmpty(rel, i))
	}
	return nil
}

// whyEmpty says why stage i takes nobody.
func (l Layout) whyEmpty(rel Release, i int) string {
	st := rel.Stages[i]
	// A stage that applies loses members only to earlier stages that
	// apply; a shadow stage to those and to earlier shadow stages.
	takenFrom := [][]int8{l.Applies}
	if st.Shadow {
		takenFrom = append(takenFrom, l.Shadows)
	}
	matched := 0
	var takers []int
	for pos, m := range rel.Membership {
		if !instance.Matches(*m, st.Selector) {
			continue
		}
		matched++
		for _, idx := range takenFrom {
			if j := int(idx[pos]); idx[pos] != none && j < i && !slices.Contains(takers, j) {
				takers = append(takers, j)
			}
		}
	}
	if matched == 0 {
		return fmt.Sprintf("none of the %d frozen members matches its selector %s", len(rel.Membership), selectorString(st.Selector))
	}
	slices.Sort(takers)
	names := make([]string, len(takers))
	for k, j := range takers {
		names[k] = rel.Stages[j].Name
	}
	return fmt.Sprintf("the %d frozen members its selector matches are all taken by earlier stages (%s)", matched, strings.Join(names, ", "))
}

// selectorString renders a selector as the CLI writes it: k=v,... in key
// order.
func selectorString(sel map[string]string) string {
	keys := make([]string, 0, len(sel))
	for k := range sel {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + sel[k]
	}
	return "{" + strings.Join(parts, ",") + "}"
}
