package rollout

import (
	"context"
	"fmt"
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
	// Retirements are the members retired from the membership, in the
	// order they made its generations.
	Retirements []Retirement
	// MembershipGeneration is the membership's generation: 1 as frozen,
	// plus one per retirement.
	MembershipGeneration int64
	// Coverage says how many members reported what they run.
	Coverage Coverage
	// State is the release's state at Revision.
	State release.State
}

// Status evaluates every stage of a release against its frozen membership,
// at one store revision, after every change committed before the call. It
// only reads: a stage it finds passed or failed is recorded by Settle. The
// views keep the newest and the active release of each config; any other
// is read from the store.
func (r *Rollouts) Status(ctx context.Context, config string, gen int64) (Status, error) {
	return r.StatusAt(ctx, config, gen, 0)
}

// StatusAt is Status as the store was at revision rev (0: after every
// change committed before the call), for the later pages of a status read
// at the revision of the first: from the views when they are at rev, else
// from the store, which fails with store.ErrCompacted once rev was
// compacted. The release's state is read at the same revision.
func (r *Rollouts) StatusAt(ctx context.Context, config string, gen, rev int64) (Status, error) {
	st, err := r.statusAt(ctx, config, gen, rev)
	if err != nil {
		return Status{}, err
	}
	states, err := r.releaseStatesAt(ctx, config, st.Revision)
	if err != nil {
		return Status{}, err
	}
	st.State = states(st.Release)
	return st, nil
}

func (r *Rollouts) statusAt(ctx context.Context, config string, gen, rev int64) (Status, error) {
	if err := r.wait(ctx, rev == 0); err != nil {
		return Status{}, err
	}
	v := r.views
	v.mu.RLock()
	if t := v.findTalliedLocked(config, gen); t != nil && (rev == 0 || rev == v.rev) {
		cv := v.configs[config]
		st := statusOf(t, v.rev, cv.ptr, cv.state(), v.applied[config], v.regs, r.now())
		v.mu.RUnlock()
		return st, nil
	}
	v.mu.RUnlock()
	if rev == 0 {
		var err error
		if rev, err = r.currentRevision(ctx); err != nil {
			return Status{}, err
		}
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
	regs, applied, err := r.regsAndAppliedAt(ctx, config, rev)
	if err != nil {
		return Status{}, err
	}
	return statusOf(t, rev, s.ptr, cs, applied, regs, s.now), nil
}

// statusOf is the status of the tracked release t at rev.
func statusOf(t *tracked, rev int64, ptr Pointer, cs configState, applied map[string]applyInfo, regs map[string]registration, now time.Time) Status {
	stale := staleMembers(t.rel.Generation, t.plan, t.latest(), cs, regs)
	st := Status{Release: t.rel, Revision: rev, Stages: t.stageResults(now, stale), Pointer: ptr, Stop: t.stop, Progress: t.progress,
		Coverage:             coverage(t.plan, t.rel.Generation, t.rel.ContentDigest, applied, regs),
		MembershipGeneration: membershipGeneration(t.retired), Retirements: retirementsInOrder(t.retired)}
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
