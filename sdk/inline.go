package sdk

import (
	"sync"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
)

// inlineReleases holds the releases a session sent with the assignments
// that name them (SessionHello.inline_releases), so that an apply takes
// its release from here instead of downloading it: a promotion to a
// fleet then costs the server no GetRelease call per instance. What is
// held is verified as a download is (its content must hash to the
// assignment's digest). Each config holds the releases of its current
// assignments only: a message that changes a config's assignments
// replaces them, and a full set replaces all.
type inlineReleases struct {
	mu       sync.Mutex
	byConfig map[string][]cachedRelease
}

func newInlineReleases() *inlineReleases {
	return &inlineReleases{byConfig: map[string][]cachedRelease{}}
}

// keep takes the releases rels of a message of assignments, which is not
// older than the set held.
func (r *inlineReleases) keep(msg *pawlv1.WatchAssignmentsResponse, rels []*pawlv1.Release) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if msg.GetFull() {
		clear(r.byConfig)
	}
	for _, id := range msg.GetRemovedConfigIds() {
		delete(r.byConfig, id)
	}
	for _, a := range msg.GetAssignments() {
		delete(r.byConfig, a.GetConfigId())
	}
	for _, rel := range rels {
		config := rel.GetSpec().GetConfigId()
		for _, a := range msg.GetAssignments() {
			if a.GetConfigId() == config && a.GetGeneration() == rel.GetGeneration() {
				r.byConfig[config] = append(r.byConfig[config], releaseFromProto(rel))
				break
			}
		}
	}
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
