package rollout

import (
	"context"
	"log/slog"
	"time"
)

// Supervise stops rollouts at their deadline even when nobody is looking.
// Every interval it checks each config's newest release: if it was never
// promoted, has no stop record and its deadline has passed, it is evaluated,
// which writes the stop record; the stop reaches every assignment stream,
// and canary instances go back to the active generation. Supervise returns
// when ctx is done; errors are logged on log and retried at the next tick.
func (r *Rollouts) Supervise(ctx context.Context, interval time.Duration, log *slog.Logger) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		if err := r.stopOverdue(ctx); err != nil && ctx.Err() == nil {
			log.Warn("rollout deadline check failed", "error", err)
		}
	}
}

// stopOverdue evaluates every overdue rollout once.
func (r *Rollouts) stopOverdue(ctx context.Context) error {
	configs, err := r.releases.Configs(ctx)
	if err != nil {
		return err
	}
	for _, config := range configs {
		latest, err := r.releases.Latest(ctx, config)
		if err != nil {
			return err
		}
		if !r.now().After(latest.CreatedAt.Add(latest.Deadline)) {
			continue
		}
		ptr, err := r.Pointer(ctx, config)
		if err != nil {
			return err
		}
		if ptr.promoted(latest.Generation) {
			continue
		}
		stop, err := r.GetStop(ctx, config, latest.Generation)
		if err != nil {
			return err
		}
		if stop != nil {
			continue
		}
		if _, err := r.Status(ctx, config, latest.Generation); err != nil {
			return err
		}
	}
	return nil
}
