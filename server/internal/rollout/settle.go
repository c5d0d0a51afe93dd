package rollout

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pawlcfg/pawl/server/internal/quorum"
	"github.com/pawlcfg/pawl/server/internal/records"
	"github.com/pawlcfg/pawl/server/internal/store"
)

// Settle moves a release's rollout forward as far as its evaluation allows,
// and records it: the first reached stage found failed (its rejections
// passed the threshold, or the deadline came while it waited) stops the rollout with
// every stage's tallies as evidence, and so does a deadline that passed
// before anyone promoted it; otherwise each stage found passed,
// in plan order, is added to the progress record, which reaches the next
// stage and assigns the release to its instances; a stage so reached is
// judged at once, since it may have failed before it was reached. A release whose rollout
// is over (stopped, promoted, superseded) is left alone.
//
// Each write is conditioned on the pointer, the stop record and the
// progress record read, so Settle never stops a release that a concurrent
// Promote made active, and concurrent calls record each step once.
func (r *Rollouts) Settle(ctx context.Context, config string, gen int64) error {
	rev, err := r.currentRevision(ctx)
	if err != nil {
		return err
	}
	return r.settleAt(ctx, config, gen, rev)
}

// settleAt is Settle on views at revision rev or later: after an ACK, the
// ACK's revision, however far the store moved since.
func (r *Rollouts) settleAt(ctx context.Context, config string, gen, rev int64) error {
	for range maxAttempts {
		reached, err := r.settle(ctx, config, gen, rev)
		switch {
		case errors.Is(err, store.ErrRevisionMismatch):
			rev = 0 // the views lagged a write: the next attempt waits for the store as it is
		case err != nil || reached == 0:
			return err
		default:
			// A stage was reached: it may have failed already (its members
			// all retired, say), and nothing else may come to judge it.
			rev = reached
		}
	}
	return fmt.Errorf("%w: settling %s generation %d", ErrContended, config, gen)
}

// settle is one step of settleAt. It returns the revision of the progress
// record it wrote when it reached a stage (0: it wrote none).
func (r *Rollouts) settle(ctx context.Context, config string, gen, rev int64) (int64, error) {
	if rev == 0 {
		var err error
		if rev, err = r.currentRevision(ctx); err != nil {
			return 0, err
		}
	}
	if err := r.views.waitFor(ctx, rev); err != nil {
		return 0, err
	}
	rv, err := r.viewOf(ctx, config, gen, false)
	if err != nil || !rv.candidate() {
		return 0, err
	}
	for i, ev := range rv.evals {
		// A stage not reached assigned the release to nobody, so nothing
		// it says can stop the rollout: it is judged once it is reached.
		if ev.Outcome == quorum.Failed && rv.progress.reached(i) {
			_, err := r.writeStop(ctx, rv.snapshot, newStop(rv.snapshot, rv.evals, rv.rel.Stages[i].Name, ev.Reason))
			return 0, err
		}
	}
	if deadline := rv.rel.CreatedAt.Add(rv.rel.Deadline); rv.now.After(deadline) {
		// Every stage passed, but nobody promoted it in time: Promote now
		// refuses it, so it stops rather than stay a candidate forever.
		_, err := r.writeStop(ctx, rv.snapshot, newStop(rv.snapshot, rv.evals, "", fmt.Sprintf("the deadline passed at %s before the release was promoted", deadline.Format(time.RFC3339))))
		return 0, err
	}
	progress := rv.progress
	progress.Passed = append([]StagePass(nil), rv.progress.Passed...)
	for len(progress.Passed) < len(rv.evals) && rv.evals[len(progress.Passed)].Outcome == quorum.Passed {
		i := len(progress.Passed)
		progress.Passed = append(progress.Passed, StagePass{Stage: rv.rel.Stages[i].Name, Time: rv.now.UTC(), Evidence: rv.evals[i]})
	}
	if len(progress.Passed) == len(rv.progress.Passed) {
		return 0, nil
	}
	b, err := records.Encode(progress)
	if err != nil {
		return 0, err
	}
	res, err := r.store.Txn(ctx, store.Txn{
		Compares: []store.Compare{
			{Key: records.Pointer(config), ModRevision: rv.ptr.Revision},
			{Key: records.Stop(config, gen), ModRevision: 0},
			{Key: records.Progress(config, gen), ModRevision: rv.progress.Revision},
		},
		Puts: []store.Put{{Key: records.Progress(config, gen), Value: b}},
	})
	if err != nil {
		return 0, fmt.Errorf("rollout: record progress of %s generation %d: %w", config, gen, err)
	}
	return res.Revision, nil
}

func newStop(s snapshot, evals []quorum.Evaluation, stage, reason string) Stop {
	st := Stop{ConfigID: s.rel.ConfigID, Generation: s.rel.Generation, Stage: stage, Reason: reason, Time: s.now.UTC(), Evidence: evals}
	for _, res := range s.rel.Stages {
		st.StageNames = append(st.StageNames, res.Name)
	}
	return st
}

// writeStop writes st if the pointer is still the one s read and the
// release has no stop record: a stop never lands on a release that a
// concurrent Promote made active. A failed condition is returned as the
// store's ErrRevisionMismatch.
func (r *Rollouts) writeStop(ctx context.Context, s snapshot, st Stop) (Stop, error) {
	b, err := records.Encode(st)
	if err != nil {
		return Stop{}, fmt.Errorf("rollout: encode stop record: %w", err)
	}
	res, err := r.store.Txn(ctx, store.Txn{
		Compares: []store.Compare{
			{Key: records.Pointer(st.ConfigID), ModRevision: s.ptr.Revision},
			{Key: records.Stop(st.ConfigID, st.Generation), ModRevision: 0},
		},
		Puts: []store.Put{{Key: records.Stop(st.ConfigID, st.Generation), Value: b}},
	})
	if err != nil {
		return Stop{}, fmt.Errorf("rollout: write stop record of %s generation %d: %w", st.ConfigID, st.Generation, err)
	}
	st.Revision = res.Revision
	return st, nil
}

// GetStop returns the stop record of a release, or nil while its rollout
// goes on.
func (r *Rollouts) GetStop(ctx context.Context, config string, gen int64) (*Stop, error) {
	return r.stopAt(ctx, config, gen, 0)
}

// StopRollout stops a release's rollout by hand, as an operator does at the
// first sign of trouble: the stop record names the actor and the reason,
// and holds every stage's tallies. A release that was promoted cannot be
// stopped (roll back instead), nor one already stopped or superseded.
func (r *Rollouts) StopRollout(ctx context.Context, config string, gen int64, reason, actor string) (Stop, error) {
	if reason == "" {
		return Stop{}, fmt.Errorf("%w: a stop needs a reason, for the audit trail", ErrInvalid)
	}
	for range maxAttempts {
		rv, err := r.viewOf(ctx, config, gen, true)
		if err != nil {
			return Stop{}, err
		}
		s := rv.snapshot
		switch {
		case s.stop != nil:
			return Stop{}, fmt.Errorf("%w: the rollout of %s generation %d already stopped at %s: %s",
				ErrNotReady, config, gen, s.stop.Time.Format(time.RFC3339), s.stop.Reason)
		case s.ptr.promoted(gen):
			return Stop{}, fmt.Errorf("%w: %s generation %d was promoted (active generation %d); roll back instead",
				ErrNotReady, config, gen, s.ptr.Generation)
		case gen < s.latest:
			return Stop{}, fmt.Errorf("%w: %s generation %d was superseded by generation %d; nothing of it is offered any more",
				ErrNotReady, config, gen, s.latest)
		}
		st := newStop(s, rv.evals, "", reason)
		st.Manual, st.Actor = true, actor
		written, err := r.writeStop(ctx, s, st)
		if errors.Is(err, store.ErrRevisionMismatch) {
			continue // promoted or stopped meanwhile: the next read says which
		}
		return written, err
	}
	return Stop{}, fmt.Errorf("%w: stopping %s generation %d", ErrContended, config, gen)
}
