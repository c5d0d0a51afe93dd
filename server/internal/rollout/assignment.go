package rollout

import (
	"context"
	"maps"
	"slices"

	"github.com/pawlcfg/pawl/sdk/appversion"
	"github.com/pawlcfg/pawl/server/internal/release"
)

// configState is what decides every assignment of a config at one
// revision: its pointer, its active release, and its candidate (the newest
// release, while its rollout goes on) with the stages it reached.
type configState struct {
	ptr    Pointer
	active *release.Release
	cand   *candidate
}

type candidate struct {
	plan     plan
	progress Progress
}

// state is the config's assignment state as the views hold it. The caller
// holds the views' read lock; what it returns stays valid after.
func (cv *configView) state() configState {
	cs := configState{ptr: cv.ptr}
	if cv.active != nil {
		cs.active = &cv.active.rel // immutable: a tracked release never changes
	}
	if t := cv.newest; t != nil && t.rel.Generation == cv.head && !cv.ptr.promoted(cv.head) && t.stop == nil {
		cs.cand = &candidate{plan: t.plan, progress: t.progress}
	}
	return cs
}

// configStateAt reads a config's state at rev.
func (r *Rollouts) configStateAt(ctx context.Context, config string, rev int64) (configState, error) {
	ptr, err := r.pointerAt(ctx, config, rev)
	if err != nil {
		return configState{}, err
	}
	head, err := r.releases.HeadAt(ctx, config, rev)
	if err != nil {
		return configState{}, err
	}
	var newest *snapshot
	if head > 0 && !ptr.promoted(head) {
		s, err := r.load(ctx, config, head, rev)
		if err != nil {
			return configState{}, err
		}
		newest = &s
	}
	return r.configState(ctx, config, ptr, newest)
}

// configState completes a config's state from its pointer and the snapshot
// of its newest release (nil when that was promoted), both read at one
// revision.
func (r *Rollouts) configState(ctx context.Context, config string, ptr Pointer, newest *snapshot) (configState, error) {
	cs := configState{ptr: ptr}
	if newest != nil && newest.candidate() {
		cs.cand = &candidate{plan: newPlan(newest.rel, newest.retired), progress: newest.progress}
	}
	if ptr.Generation > 0 {
		active, err := r.releases.Get(ctx, config, ptr.Generation)
		if err != nil {
			return configState{}, err
		}
		cs.active = &active
	}
	return cs, nil
}

// Assignment is the generation of one config an instance must run, or, for
// a shadow stage, validate without applying. An instance activates only
// what it is assigned, never the largest generation it has seen.
type Assignment struct {
	ConfigID        string
	Generation      int64
	ContentDigest   string
	ValidatorDigest string
	// Stage is empty for the active generation, and names the stage for a
	// canary assignment of a newer, not yet promoted release.
	Stage string
	// Shadow says the instance validates this generation and reports
	// VALIDATED, and never applies it: it keeps running what it runs.
	Shadow bool
	// Epoch is the config pointer's epoch, which every rollback increments.
	Epoch int64
}

// assign returns what identity, registered with appVersion ("": not
// registered), must run (nil: nothing) and what it must validate in a
// shadow stage (nil: nothing). A release whose minimum app version is above
// appVersion is never assigned: an instance that came back downgraded gets
// the active generation instead, if it may run that, or nothing.
func (cs configState) assign(identity, appVersion string) (run, shadow *Assignment) {
	if cs.active != nil && mayRun(*cs.active, appVersion) {
		run = assignmentOf(*cs.active, "", false, cs.ptr.Epoch)
	}
	if cs.cand == nil {
		return run, nil
	}
	i, validateOnly, ok := cs.cand.plan.assignedBy(cs.cand.progress, identity)
	if !ok || !mayRun(cs.cand.plan.rel, appVersion) {
		return run, nil
	}
	a := assignmentOf(cs.cand.plan.rel, cs.cand.plan.rel.Stages[i].Name, validateOnly, cs.ptr.Epoch)
	if validateOnly {
		return run, a
	}
	return a, nil
}

// mayRun reports whether an instance of appVersion may run rel: rel has no
// minimum app version, or appVersion is at least that. The release froze
// its membership by the versions instances had then; an instance that
// registers again (a restart, a rollback of the application) is judged by
// the version it has now. An unknown or unreadable version is below every
// minimum.
func mayRun(rel release.Release, appVersion string) bool {
	if rel.MinAppVersion == "" {
		return true
	}
	floor, err := appversion.Parse(rel.MinAppVersion)
	return err == nil && appversion.AtLeast(appVersion, floor)
}

func assignmentOf(rel release.Release, stage string, shadow bool, epoch int64) *Assignment {
	return &Assignment{ConfigID: rel.ConfigID, Generation: rel.Generation, ContentDigest: rel.ContentDigest,
		ValidatorDigest: rel.ValidatorDigest, Stage: stage, Shadow: shadow, Epoch: epoch}
}

// Assignments computes what the instance must run, config by config, all
// at one store revision, after every change committed before the call, in
// config order; see AssignmentsAt.
func (r *Rollouts) Assignments(ctx context.Context, identity string) ([]Assignment, int64, error) {
	rev, err := r.currentRevision(ctx)
	if err != nil {
		return nil, 0, err
	}
	byConfig, at, err := r.AssignmentsAt(ctx, identity, rev, nil)
	if err != nil {
		return nil, 0, err
	}
	var out []Assignment
	for _, config := range slices.Sorted(maps.Keys(byConfig)) {
		out = append(out, byConfig[config]...)
	}
	return out, at, nil
}

// AssignmentsAt computes what the instance must run, by config, from the
// views once they are at revision rev or later: the newest release's
// generation if its rollout goes on and reached the stage that takes the
// instance, else the active generation; and, for an instance of a reached
// shadow stage, the release to validate beside what it runs. It computes
// the configs named, each with its assignments (none: an empty list), or,
// when configs is nil, every config that has any. It returns the revision
// the views were at. Every assignment stream reads the same views: a
// change is computed once, and each stream only looks its instance up in
// the configs the change touched.
func (r *Rollouts) AssignmentsAt(ctx context.Context, identity string, rev int64, configs []string) (map[string][]Assignment, int64, error) {
	if err := r.views.waitFor(ctx, rev); err != nil {
		return nil, 0, err
	}
	v := r.views
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := map[string][]Assignment{}
	if configs == nil {
		for config, cv := range v.configs {
			if as := cv.assign(identity, v.regs[identity].appVersion); len(as) > 0 {
				out[config] = as
			}
		}
		return out, v.rev, nil
	}
	for _, config := range configs {
		var as []Assignment
		if cv := v.configs[config]; cv != nil {
			as = cv.assign(identity, v.regs[identity].appVersion)
		}
		out[config] = as
	}
	return out, v.rev, nil
}

// assign is what identity, registered with appVersion, must run of the
// config and, in a shadow stage, validate: zero, one or two assignments.
// The caller holds the views' read lock.
func (cv *configView) assign(identity, appVersion string) []Assignment {
	run, shadow := cv.state().assign(identity, appVersion)
	var out []Assignment
	for _, a := range []*Assignment{run, shadow} {
		if a != nil {
			out = append(out, *a)
		}
	}
	return out
}
