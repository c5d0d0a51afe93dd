package release

import (
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"unique"
	"weak"

	"github.com/pawlcfg/pawl/server/internal/quorum"
)

// A release's frozen membership is what a fleet costs the server per
// release it keeps: the rollout views keep the newest and the active
// release of every config, and the release cache more, each a list of the
// same instances. So a release holds its members as pointers to members
// shared by every release that froze an equal one (interned), and an index
// by identity of four bytes a member: with 10,000 instances in 100
// configs that is 12 bytes per instance per release, where a copy of each
// member with its strings and labels was 100 to 400.

// memberIndex finds a member of a frozen membership by identity: the
// members' positions, sorted by identity, so that a lookup is a binary
// search (a map by identity would cost about thirty bytes a member).
type memberIndex []int32

// indexMembers indexes members by identity.
func indexMembers(members []*quorum.Member) memberIndex {
	idx := make(memberIndex, len(members))
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortStableFunc(idx, func(a, b int32) int { return strings.Compare(members[a].ID, members[b].ID) })
	return idx
}

// MemberIndex is the position in r.Membership of the member with identity
// id (ok false: id is not a frozen member). A release read from the store
// or made by Create finds it in an index built once; another (a literal)
// by a scan.
func (r Release) MemberIndex(id string) (int, bool) {
	if len(r.byID) != len(r.Membership) {
		i := slices.IndexFunc(r.Membership, func(m *quorum.Member) bool { return m.ID == id })
		return i, i >= 0
	}
	k, ok := slices.BinarySearchFunc(r.byID, id, func(j int32, id string) int { return strings.Compare(r.Membership[j].ID, id) })
	if !ok {
		return -1, false
	}
	return int(r.byID[k]), true
}

// compact makes a release cheap to keep: its members interned, its
// ineligible instances held in exactly their length with their strings
// interned, and its membership indexed by identity.
func (r *Release) compact() {
	in := make([]*quorum.Member, len(r.Membership))
	for i, m := range r.Membership {
		in[i] = internMember(*m)
	}
	r.Membership = in
	if r.Ineligible != nil {
		in := make([]quorum.Member, len(r.Ineligible))
		for i, m := range r.Ineligible {
			in[i] = internStrings(m)
		}
		r.Ineligible = in
	}
	r.byID = indexMembers(r.Membership)
}

// frozen returns members as a membership: each member interned.
func frozen(members []quorum.Member) []*quorum.Member {
	out := make([]*quorum.Member, len(members))
	for i, m := range members {
		out[i] = internMember(m)
	}
	return out
}

// memberKey is what makes two members equal: every field, the labels as
// one string.
type memberKey struct {
	id, zone, role, appVersion, labels string
	weight                             float64
	credential                         bool
}

// members is the table of interned members. It holds them weakly: a member
// no release holds any more is collected, and its entry removed.
var members = struct {
	mu sync.Mutex
	m  map[memberKey]weak.Pointer[quorum.Member]
}{m: map[memberKey]weak.Pointer[quorum.Member]{}}

// internMember returns the one shared member equal to m. The member it
// returns, like a cached release, must never be modified.
func internMember(m quorum.Member) *quorum.Member {
	m = internStrings(m)
	if m.Weight != m.Weight {
		return &m // NaN: no key would ever find it again (the edge refuses one)
	}
	key := memberKey{id: m.ID, zone: m.Zone, role: m.Role, appVersion: m.AppVersion, labels: labelsKey(m.Labels),
		weight: m.Weight, credential: m.InstanceCredential}
	members.mu.Lock()
	defer members.mu.Unlock()
	if p := members.m[key].Value(); p != nil {
		return p
	}
	p := &m
	wp := weak.Make(p)
	members.m[key] = wp
	runtime.AddCleanup(p, func(key memberKey) {
		members.mu.Lock()
		defer members.mu.Unlock()
		if members.m[key] == wp {
			delete(members.m, key)
		}
	}, key)
	return p
}

// labelsKey is the labels as one string, in key order (interned: the
// table's keys share it).
func labelsKey(labels map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(labels[k])
		b.WriteByte(0)
	}
	return intern(b.String())
}

// internStrings is m with every string interned and labels of its own.
func internStrings(m quorum.Member) quorum.Member {
	m.ID, m.Zone, m.Role, m.AppVersion = intern(m.ID), intern(m.Zone), intern(m.Role), intern(m.AppVersion)
	if m.Labels != nil {
		labels := make(map[string]string, len(m.Labels))
		for k, v := range m.Labels {
			labels[intern(k)] = intern(v)
		}
		m.Labels = labels
	}
	return m
}

// intern is the one copy of s that every interned equal string shares; it
// lives as long as any of them does (package unique).
func intern(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}
