package rollout

import (
	"context"
	"sort"
	"time"

	"github.com/pawlcfg/pawl/server/internal/instance"
	"github.com/pawlcfg/pawl/server/internal/quorum"
	"github.com/pawlcfg/pawl/server/internal/release"
)

// Stop is the record of a stopped rollout: the stage that failed (or the
// operator who stopped it), why, and every stage's tallies at that moment.
// It is written once and never changed; after it, nothing of the release is
// offered to instances, ACKs no longer count, and Promote refuses it.
type Stop struct {
	ConfigID   string              `json:"config_id"`
	Generation int64               `json:"generation"`
	Stage      string              `json:"stage,omitempty"`
	Reason     string              `json:"reason"`
	Manual     bool                `json:"manual"`
	Actor      string              `json:"actor,omitempty"`
	Time       time.Time           `json:"time"`
	Evidence   []quorum.Evaluation `json:"evidence"`
	StageNames []string            `json:"stage_names"`
	// Revision is the store revision of the record.
	Revision int64 `json:"-"`
}

// Status is a release's rollout as it stands at one store revision.
type Status struct {
	Release release.Release
	// Revision is the store revision everything was read at.
	Revision int64
	// Stages are evaluated at Revision, from each member's latest counted
	// ACK of its current registration.
	Stages []StageResult
	// Acks are every ACK of the release, counted or not.
	Acks []Ack
	// Pointer is the config's active pointer.
	Pointer Pointer
	// Stop is set once the rollout stopped.
	Stop *Stop
	// Progress records the stages that passed.
	Progress Progress
	// Retirements are the members retired from the membership, by identity.
	Retirements []Retirement
	// Coverage says how many members reported what they run.
	Coverage Coverage
}

// Status evaluates every stage of a release against its frozen membership,
// at one store revision. It only reads: a stage it finds passed or failed is
// recorded by Settle.
func (r *Rollouts) Status(ctx context.Context, config string, gen int64) (Status, error) {
	rev, err := r.currentRevision(ctx)
	if err != nil {
		return Status{}, err
	}
	s, err := r.load(ctx, config, gen, rev)
	if err != nil {
		return Status{}, err
	}
	ev, err := r.evaluateAt(ctx, s)
	if err != nil {
		return Status{}, err
	}
	applied, err := r.appliedAll(ctx, config, rev)
	if err != nil {
		return Status{}, err
	}
	st := Status{Release: s.rel, Revision: rev, Stages: ev.stages, Acks: ev.acks, Pointer: s.ptr, Stop: s.stop, Progress: s.progress,
		Coverage: coverage(ev.plan, gen, s.rel.ContentDigest, applied, ev.regs)}
	for _, rt := range s.retired {
		st.Retirements = append(st.Retirements, rt)
	}
	sort.Slice(st.Retirements, func(i, j int) bool { return st.Retirements[i].WorkloadIdentity < st.Retirements[j].WorkloadIdentity })
	return st, nil
}

// evaluation is a snapshot's stages evaluated, with what they rest on.
type evaluation struct {
	plan   plan
	acks   []Ack
	regs   map[string]instance.Record
	stages []StageResult
}

// evaluateAt reads the ACKs, registrations and config state at s.rev and
// evaluates s's stages.
func (r *Rollouts) evaluateAt(ctx context.Context, s snapshot) (evaluation, error) {
	acks, err := r.acksAt(ctx, s.rel.ConfigID, s.rel.Generation, "", s.rev)
	if err != nil {
		return evaluation{}, err
	}
	regs, err := r.registry.Registrations(ctx, s.rev)
	if err != nil {
		return evaluation{}, err
	}
	var cs configState
	if s.rel.Generation == s.latest {
		// s is the config's newest release: the state reuses it.
		var newest *snapshot
		if !s.ptr.promoted(s.latest) {
			newest = &s
		}
		cs, err = r.configState(ctx, s.rel.ConfigID, s.ptr, newest)
	} else {
		cs, err = r.configStateAt(ctx, s.rel.ConfigID, s.rev)
	}
	if err != nil {
		return evaluation{}, err
	}
	p := newPlan(s.rel, s.retired)
	latest := latestCounted(acks, regs)
	stale := staleMembers(s.rel.Generation, p.members, latest, cs)
	return evaluation{plan: p, acks: acks, regs: regs, stages: evaluate(s, p, latest, stale)}, nil
}
