package sdk

import (
	"slices"
	"sync"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
)

// inlineReleases holds the releases a session sent with the assignments
// that name them (SessionHello.inline_releases), so that an apply takes
// its release from here instead of downloading it: a promotion to a
// fleet then costs the server no GetRelease call per instance. What is
// held is verified as a download is (its content must hash to the
// assignment's digest). Each config holds the releases of its current
// assignments only: a message of assignments drops those no longer
// assigned (a full set: of every config; a delta: of the configs it
// names). A resumed session names the releases of the assignments the
// client holds (held), and the server does not send them again. A client
// that follows some configs only (WithConfigs) keeps none of the others.
type inlineReleases struct {
	// follows reports whether the client follows a config.
	follows func(config string) bool

	mu       sync.Mutex
	byConfig map[string][]cachedRelease
}

func newInlineReleases(follows func(config string) bool) *inlineReleases {
	return &inlineReleases{follows: follows, byConfig: map[string][]cachedRelease{}}
}

// keep takes the releases rels of a message of assignments, which is not
// older than the set held.
func (r *inlineReleases) keep(msg *pawlv1.WatchAssignmentsResponse, rels []*pawlv1.Release) {
	type named struct {
		config string
		gen    int64
	}
	assigned := map[named]bool{}
	touched := map[string]bool{}
	for _, a := range msg.GetAssignments() {
		assigned[named{a.GetConfigId(), a.GetGeneration()}] = true
		touched[a.GetConfigId()] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range msg.GetRemovedConfigIds() {
		delete(r.byConfig, id)
	}
	for config, held := range r.byConfig {
		if !msg.GetFull() && !touched[config] {
			continue
		}
		held = slices.DeleteFunc(held, func(rel cachedRelease) bool { return !assigned[named{config, rel.Generation}] })
		if len(held) == 0 {
			delete(r.byConfig, config)
		} else {
			r.byConfig[config] = held
		}
	}
	for _, rel := range rels {
		config := rel.GetSpec().GetConfigId()
		if !assigned[named{config, rel.GetGeneration()}] || !r.follows(config) {
			continue
		}
		held := slices.DeleteFunc(r.byConfig[config], func(c cachedRelease) bool { return c.Generation == rel.GetGeneration() })
		r.byConfig[config] = append(held, releaseFromProto(rel))
	}
}

// heldOf names the releases of the assignments in set, for a session's
// hello: the client holds each (applied, validated, or in the hands of
// its apply).
func heldOf(set map[string][]*pawlv1.Assignment) []*pawlv1.HeldRelease {
	var held []*pawlv1.HeldRelease
	for _, as := range set {
		for _, a := range as {
			held = append(held, &pawlv1.HeldRelease{ConfigId: a.GetConfigId(), Generation: a.GetGeneration(), ContentDigest: a.GetContentDigest()})
		}
	}
	return held
}

// get returns the release held for a, if one is.
func (r *inlineReleases) get(a *pawlv1.Assignment) (cachedRelease, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rel := range r.byConfig[a.GetConfigId()] {
		if rel.Generation == a.GetGeneration() {
			return rel, true
		}
	}
	return cachedRelease{}, false
}

// releaseFromProto is what the SDK keeps of a release, downloaded or
// inline.
func releaseFromProto(rel *pawlv1.Release) cachedRelease {
	spec := rel.GetSpec()
	return cachedRelease{
		Config: spec.GetConfigId(), Generation: rel.GetGeneration(), ContentDigest: rel.GetContentDigest(),
		ValidatorDigest: spec.GetValidatorDigest(), MediaType: spec.GetMediaType(), Content: spec.GetContent(),
		Params: spec.GetValidatorParams(), HealthWindow: spec.GetHealthWindow().AsDuration(), MinAppVersion: spec.GetMinAppVersion(),
		Budgets: budgetsOf(spec.GetStages()),
	}
}
