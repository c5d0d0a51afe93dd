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

// settleAll settles each config's newest release: every one, or only those
// past their deadline.
func (r *Rollouts) settleAll(ctx context.Context, everything bool) error {
	configs, err := r.releases.Configs(ctx)
	if err != nil {
		return err
	}
	for _, config := range configs {
		latest, err := r.releases.Latest(ctx, config)
		if err != nil {
			return err
		}
		if !everything && !r.now().After(latest.CreatedAt.Add(latest.Deadline)) {
			continue
		}
		if err := r.Settle(ctx, config, latest.Generation); err != nil {
			return err
		}
	}
	return nil
}
