package rollout

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/pawlcfg/pawl/server/internal/quorum"
	"github.com/pawlcfg/pawl/server/internal/records"
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
// at one store revision, after every change committed before the call. It
// only reads: a stage it finds passed or failed is recorded by Settle. The
// views keep the newest and the active release of each config; any other
// is read from the store.
func (r *Rollouts) Status(ctx context.Context, config string, gen int64) (Status, error) {
	if err := r.wait(ctx, true); err != nil {
		return Status{}, err
	}
	v := r.views
	v.mu.RLock()
	if t := v.findLocked(config, gen); t != nil {
		cv := v.configs[config]
		st := statusOf(t, v.rev, cv.ptr, cv.state(), v.applied[config], v.regs, r.now())
		v.mu.RUnlock()
		return st, nil
	}
	v.mu.RUnlock()
	rev, err := r.currentRevision(ctx)
	if err != nil {
		return Status{}, err
	}
	s, err := r.load(ctx, config, gen, rev)
	if err != nil {
		return Status{}, err
	}
	t, err := r.trackedAt(ctx, s)
	if err != nil {
		return Status{}, err
	}
	cs, err := r.configStateAt(ctx, config, rev)
	if err != nil {
		return Status{}, err
	}
	recs, err := r.registry.Registrations(ctx, rev)
	if err != nil {
		return Status{}, err
	}
	regs := make(map[string]registration, len(recs))
	for id, rec := range recs {
		regs[id] = registrationOf(rec)
	}
	all, err := r.appliedAll(ctx, config, rev)
	if err != nil {
		return Status{}, err
	}
	applied := make(map[string]applyInfo, len(all))
	for id, rec := range all {
		applied[id] = applyInfoOf(rec)
	}
	return statusOf(t, rev, s.ptr, cs, applied, regs, s.now), nil
}

// statusOf is the status of the tracked release t at rev.
func statusOf(t *tracked, rev int64, ptr Pointer, cs configState, applied map[string]applyInfo, regs map[string]registration, now time.Time) Status {
	stale := staleMembers(t.rel.Generation, t.plan.members, t.latest(), cs, regs)
	st := Status{Release: t.rel, Revision: rev, Stages: t.stageResults(now, stale), Pointer: ptr, Stop: t.stop, Progress: t.progress,
		Coverage: coverage(t.plan, t.rel.Generation, t.rel.ContentDigest, applied, regs)}
	for _, rt := range t.retired {
		st.Retirements = append(st.Retirements, rt)
	}
	sort.Slice(st.Retirements, func(i, j int) bool { return st.Retirements[i].WorkloadIdentity < st.Retirements[j].WorkloadIdentity })
	return st
}

// AckPage is one page of a release's ACKs, counted or not, by instance and
// arrival, read at revision (0: now): at most limit of them after the key
// after ("" for the first page). It returns the revision read, to read the
// next pages at, and whether more follow.
func (r *Rollouts) AckPage(ctx context.Context, config string, gen, revision int64, after string, limit int) ([]Ack, int64, bool, error) {
	if _, err := r.releases.Get(ctx, config, gen); err != nil {
		return nil, 0, false, err
	}
	prefix := records.Acks(config, gen)
	if after != "" && !strings.HasPrefix(after, prefix) {
		return nil, 0, false, fmt.Errorf("%w: %q is not an ACK of %s generation %d", ErrInvalid, after, config, gen)
	}
	page, err := r.store.List(ctx, prefix, revision, after, limit)
	if err != nil {
		return nil, 0, false, err
	}
	out := make([]Ack, 0, len(page.KVs))
	for _, kv := range page.KVs {
		a, err := decodeAck(kv)
		if err != nil {
			return nil, 0, false, err
		}
		out = append(out, a)
	}
	return out, page.Revision, page.More, nil
}
