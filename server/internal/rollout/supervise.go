package rollout

import (
	"context"
	"log/slog"
	"time"
)

// Supervise moves rollouts forward even when nobody is looking. On its
// first pass it settles every config's newest release, so that a step an
// ACK earned just before a crash is recorded after the restart; after
// that, every interval, it settles each newest release whose deadline has
// passed, which stops a rollout still waiting: the stop reaches every
// assignment stream, and canary instances go back to the active
// generation. Supervise returns when ctx is done; errors are logged on log
// and retried at the next tick.
func (r *Rollouts) Supervise(ctx context.Context, interval time.Duration, log *slog.Logger) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	everything := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		if err := r.settleAll(ctx, everything); err != nil {
			if ctx.Err() == nil {
				log.Warn("rollout supervision failed", "error", err)
			}
			continue
		}
		everything = false
	}
}

// settleAll settles each config's newest release while it is a
// candidate: every one, or only those past their deadline. The candidates
// come from the views; no release is read to find them.
func (r *Rollouts) settleAll(ctx context.Context, everything bool) error {
	if err := r.wait(ctx, false); err != nil {
		return err
	}
	type due struct {
		config string
		gen    int64
	}
	var todo []due
	now := r.now()
	v := r.views
	v.mu.RLock()
	for config, cv := range v.configs {
		t := cv.newest
		if t == nil || t.rel.Generation != cv.head || cv.ptr.promoted(cv.head) || t.stop != nil {
			continue
		}
		if everything || now.After(t.rel.CreatedAt.Add(t.rel.Deadline)) {
			todo = append(todo, due{config, cv.head})
		}
	}
	v.mu.RUnlock()
	for _, d := range todo {
		if err := r.Settle(ctx, d.config, d.gen); err != nil {
			return err
		}
	}
	return nil
}
