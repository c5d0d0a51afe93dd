package release

import (
	"slices"
	"strings"
	"unique"

	"github.com/pawlcfg/pawl/server/internal/quorum"
)

// memberIndex finds a member of a frozen membership by identity: the
// members' positions, sorted by identity, so a lookup is a binary search
// and the index costs four bytes a member (a map by identity would cost
// about thirty, per release kept).
type memberIndex []int32

// indexMembers indexes members by identity.
func indexMembers(members []quorum.Member) memberIndex {
	idx := make(memberIndex, len(members))
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortStableFunc(idx, func(a, b int32) int { return strings.Compare(members[a].ID, members[b].ID) })
	return idx
}

// MemberIndex is the position in r.Membership of the member with identity
// id (ok false: id is not a frozen member). A release read from the store
// or made by Create looks it up in an index built once; another (a
// literal) by a scan.
func (r Release) MemberIndex(id string) (int, bool) {
	if len(r.byID) != len(r.Membership) {
		i := slices.IndexFunc(r.Membership, func(m quorum.Member) bool { return m.ID == id })
		return i, i >= 0
	}
	k, ok := slices.BinarySearchFunc(r.byID, id, func(j int32, id string) int { return strings.Compare(r.Membership[j].ID, id) })
	if !ok {
		return -1, false
	}
	return int(r.byID[k]), true
}

// compact makes a decoded release cheap to keep: its member lists hold
// exactly their length (a decoder's growing slice can hold up to twice
// it), every string of a member is shared with the same string of every
// other release (interned: the views keep the newest and active release of
// every config, and the same instance is a member of each), and the
// membership is indexed by identity.
func (r *Release) compact() {
	r.Membership = compactMembers(r.Membership)
	r.Ineligible = compactMembers(r.Ineligible)
	r.byID = indexMembers(r.Membership)
}

func compactMembers(members []quorum.Member) []quorum.Member {
	if members == nil {
		return nil
	}
	out := make([]quorum.Member, len(members))
	for i, m := range members {
		m.ID, m.Zone, m.Role, m.AppVersion = intern(m.ID), intern(m.Zone), intern(m.Role), intern(m.AppVersion)
		if m.Labels != nil {
			labels := make(map[string]string, len(m.Labels))
			for k, v := range m.Labels {
				labels[intern(k)] = intern(v)
			}
			m.Labels = labels
		}
		out[i] = m
	}
	return out
}

// intern is the one copy of s that every interned equal string shares; it
// lives as long as any of them does (package unique).
func intern(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}
