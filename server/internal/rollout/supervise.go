package rollout

import (
	"context"
	"log/slog"
	"time"
)

// Supervise moves rollouts forward even when nobody is looking. On its
// first pass it settles every config's newest release, so that a step an
// ACK earned just before a crash is recorded after the restart. After
// that it sleeps until the earliest deadline of a release still waiting
// (a timer over the views' deadline schedule, not a scan of the configs)
// and settles it, which stops the rollout: the stop reaches every
// assignment stream, and canary instances go back to the active
// generation.
//
// The interval is a fallback for clocks that do not follow wall time (a
// test clock moved by hand): every interval the earliest deadline is
// compared with the clock again. Supervise returns when ctx is done;
// errors are logged on log and retried at the next wake-up.
func (r *Rollouts) Supervise(ctx context.Context, interval time.Duration, log *slog.Logger) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	settled := false
	for {
		select {
		case <-ctx.Done():
			return
		default:
		}
		var err error
		if !settled {
			err = r.settleAll(ctx)
			settled = err == nil
		} else {
			err = r.settleDue(ctx)
		}
		if err != nil && ctx.Err() == nil {
			log.Warn("rollout supervision failed", "error", err)
		}
		next, moved := r.views.nextDeadline()
		wait := interval
		if !next.IsZero() && settled && err == nil {
			wait = min(max(next.Sub(r.now()), 0), time.Hour)
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-timer.C:
		case <-moved:
		}
	}
}

// settleAll settles each config's newest release while it is a
// candidate. The candidates come from the views; no release is read to
// find them.
func (r *Rollouts) settleAll(ctx context.Context) error {
	if err := r.wait(ctx, false); err != nil {
		return err
	}
	type candidate struct {
		config string
		gen    int64
	}
	var todo []candidate
	v := r.views
	v.mu.RLock()
	for config, cv := range v.configs {
		t := cv.newest
		if t == nil || t.rel.Generation != cv.head || cv.ptr.promoted(cv.head) || t.stop != nil {
			continue
		}
		todo = append(todo, candidate{config, cv.head})
	}
	v.mu.RUnlock()
	for _, c := range todo {
		if err := r.Settle(ctx, c.config, c.gen); err != nil {
			return err
		}
	}
	return nil
}

// settleDue settles each candidate whose deadline has come. Those that
// fail are scheduled again.
func (r *Rollouts) settleDue(ctx context.Context) error {
	if err := r.wait(ctx, false); err != nil {
		return err
	}
	due := r.views.due(r.now())
	for i, d := range due {
		if err := r.Settle(ctx, d.config, d.gen); err != nil {
			r.views.reschedule(due[i:])
			return err
		}
	}
	return nil
}
