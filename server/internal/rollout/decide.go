package rollout

import (
	"context"
	"errors"
	"slices"

	"github.com/pawlcfg/pawl/server/internal/instance"
	"github.com/pawlcfg/pawl/server/internal/quorum"
	"github.com/pawlcfg/pawl/server/internal/records"
)

// releaseView is what a decision about one release rests on, at one store
// revision: taken from the views for a release they keep (the newest or
// the active one of its config), or read from the store for another.
type releaseView struct {
	snapshot
	plan plan
	// evals are its stages' verdicts now.
	evals []quorum.Evaluation
	// epochs (for Promote) are the unretired frozen members' membership
	// epochs, 0 for one not registered.
	epochs map[string]int64
	// coverage (for Promote) says which members reported what they run.
	coverage Coverage
}

// viewOf returns generation gen of config. With current set, it first
// waits until the views have every change committed before the call.
func (r *Rollouts) viewOf(ctx context.Context, config string, gen int64, current bool) (releaseView, error) {
	return r.viewWith(ctx, config, gen, current, false)
}

// promoteViewOf is viewOf after every change committed before the call,
// with what Promote also decides on, at the same revision: the frozen
// members' registrations and the release's coverage.
func (r *Rollouts) promoteViewOf(ctx context.Context, config string, gen int64) (releaseView, error) {
	return r.viewWith(ctx, config, gen, true, true)
}

func (r *Rollouts) viewWith(ctx context.Context, config string, gen int64, current, forPromote bool) (releaseView, error) {
	if err := r.wait(ctx, current); err != nil {
		return releaseView{}, err
	}
	v := r.views
	v.mu.RLock()
	if t := v.findTalliedLocked(config, gen); t != nil {
		cv := v.configs[config]
		rv := releaseView{snapshot: snapshot{rev: v.rev, rel: t.rel, latest: max(cv.head, gen), ptr: cv.ptr, stop: t.stop,
			progress: t.progress, retired: t.retired, now: r.now()}, plan: t.plan}
		rv.evals = t.evaluate(rv.now)
		if forPromote {
			rv.epochs = memberEpochs(t.plan, v.regs)
			rv.coverage = coverage(t.plan, t.rel.Generation, t.rel.ContentDigest, v.applied[config], v.regs)
		}
		v.mu.RUnlock()
		return rv, nil
	}
	v.mu.RUnlock()
	rev, err := r.currentRevision(ctx)
	if err != nil {
		return releaseView{}, err
	}
	s, err := r.load(ctx, config, gen, rev)
	if err != nil {
		return releaseView{}, err
	}
	t, err := r.trackedAt(ctx, s)
	if err != nil {
		return releaseView{}, err
	}
	rv := releaseView{snapshot: s, plan: t.plan, evals: t.evaluate(s.now)}
	if forPromote {
		regs, applied, err := r.regsAndAppliedAt(ctx, config, rev)
		if err != nil {
			return releaseView{}, err
		}
		rv.epochs = memberEpochs(t.plan, regs)
		rv.coverage = coverage(t.plan, t.rel.Generation, t.rel.ContentDigest, applied, regs)
	}
	return rv, nil
}

// memberEpochs is the membership epoch (the registration's store revision)
// of each unretired frozen member, 0 for one not registered.
func memberEpochs(p plan, regs map[string]registration) map[string]int64 {
	out := make(map[string]int64, p.size)
	for m := range p.members() {
		out[m.ID] = regs[m.ID].epoch
	}
	return out
}

// regsAndAppliedAt reads every registration, and the applied records of
// config, at rev.
func (r *Rollouts) regsAndAppliedAt(ctx context.Context, config string, rev int64) (map[string]registration, map[string]applyInfo, error) {
	recs, err := r.registry.Registrations(ctx, rev)
	if err != nil {
		return nil, nil, err
	}
	regs := make(map[string]registration, len(recs))
	for id, rec := range recs {
		regs[id] = registrationOf(rec)
	}
	all, err := r.appliedAll(ctx, config, rev)
	if err != nil {
		return nil, nil, err
	}
	applied := make(map[string]applyInfo, len(all))
	for id, rec := range all {
		applied[id] = applyInfoOf(rec, 0)
	}
	return regs, applied, nil
}

// wait waits for the views' first snapshot, or, with current set, until
// they have every change committed before the call.
func (r *Rollouts) wait(ctx context.Context, current bool) error {
	if current {
		return r.views.current(ctx)
	}
	return r.views.waitFor(ctx, 0)
}

// ackView is what judging an ACK of one instance rests on.
type ackView struct {
	releaseView
	reg        registration
	registered bool
	// prior are the instance's counted ACKs of the release from its
	// current registration.
	prior []Ack
	// arrival is its last ACK's arrival nanosecond (0: none).
	arrival int64
	// stored are its stored ACKs of the release, in arrival order.
	stored []storedAck
	// applied is what it last reported applying of the config (nil: none).
	applied *applyInfo
}

// ackViewOf returns what judging identity's ACK of gen of config rests on,
// from the views as they are (the write that follows is conditioned on it
// being unchanged), or, for a release they do not keep, from the store.
func (r *Rollouts) ackViewOf(ctx context.Context, config string, gen int64, identity string) (ackView, error) {
	if err := r.wait(ctx, false); err != nil {
		return ackView{}, err
	}
	v := r.views
	v.mu.RLock()
	av, ok := r.ackViewLocked(config, gen, identity)
	v.mu.RUnlock()
	if ok {
		return av, nil
	}
	return r.ackViewFromStore(ctx, config, gen, identity, nil)
}

// ackViewLocked is ackViewOf from the views, for a release they keep (ok
// false: they do not). The caller holds the views' lock.
func (r *Rollouts) ackViewLocked(config string, gen int64, identity string) (ackView, bool) {
	v := r.views
	t := v.findLocked(config, gen)
	if t == nil {
		return ackView{}, false
	}
	cv := v.configs[config]
	av := r.instanceViewLocked(config, identity)
	av.releaseView = releaseView{snapshot: snapshot{rev: v.rev, rel: t.rel, latest: max(cv.head, gen), ptr: cv.ptr, stop: t.stop,
		progress: t.progress, retired: t.retired, now: r.now()}, plan: t.plan}
	av.prior, av.arrival, av.stored = t.prior(identity), t.arrivals[identity], slices.Clone(t.stored[identity])
	return av, true
}

// instanceViewLocked is the instance's part of an ackView, from the views
// at their revision: its registration and what it last reported applying
// of config. The caller holds the views' lock.
func (r *Rollouts) instanceViewLocked(config, identity string) ackView {
	v := r.views
	var av ackView
	av.reg, av.registered = v.regs[identity]
	if info, ok := v.applied[config][identity]; ok {
		av.applied = &info
	}
	return av
}

// addStored adds the instance's stored ACKs of the release (prev, in
// arrival order) to av, whose registration is set.
func (av *ackView) addStored(prev []Ack) {
	for _, a := range prev {
		av.arrival = max(av.arrival, a.arrival)
		av.stored = append(av.stored, storedOf(a))
		if a.Counted && av.registered && a.BootID == av.reg.boot && a.MembershipEpoch == av.reg.epoch {
			av.prior = append(av.prior, a)
		}
	}
}

// storedPlans keeps, for one batch of ACKs, the snapshots and plans of
// the releases the views do not keep, by release and store revision: a
// promotion's superseded release gets a late ACK from every instance,
// and laying out its plan (all its members) for each was most of the
// batches' work. Nil keeps nothing.
type storedPlans map[storedPlanKey]releaseView

type storedPlanKey struct {
	config   string
	gen, rev int64
}

// ackViewFromStore is ackViewOf for a release the views do not keep: its
// rollout is over, and the ACK is late; only its key and the applied
// record need the store. The release's snapshot and plan come from
// plans when it holds them at the same revision, and go into it.
func (r *Rollouts) ackViewFromStore(ctx context.Context, config string, gen int64, identity string, plans storedPlans) (ackView, error) {
	rev, err := r.currentRevision(ctx)
	if err != nil {
		return ackView{}, err
	}
	key := storedPlanKey{config: config, gen: gen, rev: rev}
	rv, ok := plans[key]
	if !ok {
		s, err := r.load(ctx, config, gen, rev)
		if err != nil {
			return ackView{}, err
		}
		rv = releaseView{snapshot: s, plan: newPlan(s.rel, s.retired)}
		if plans != nil {
			plans[key] = rv
		}
	}
	av := ackView{releaseView: rv}
	rec, err := r.registry.RegistrationAt(ctx, identity, rev)
	switch {
	case err == nil:
		av.reg, av.registered = registrationOf(rec), true
	case !errors.Is(err, instance.ErrNotFound):
		return ackView{}, err
	}
	prev, err := r.acksAt(ctx, config, gen, identity, rev)
	if err != nil {
		return ackView{}, err
	}
	av.addStored(prev)
	var applied AppliedRecord
	kv, ok, err := getAt(ctx, r.store, records.Applied(config, identity), rev, &applied)
	if err != nil {
		return ackView{}, err
	}
	if ok {
		info := applyInfoOf(applied, kv.ModRevision)
		av.applied = &info
	}
	return av, nil
}
