package singleton

import (
	"context"
	"log/slog"
	"time"

	"github.com/pawlcfg/pawl/server/internal/store"
)

// Run runs work while holder has the lease name of st, until ctx ends. The
// lease lasts ttl and is renewed every ttl/3; work's context carries the
// lease's fence (store.WithFence) and ends when the lease is lost, or
// could not be renewed for long enough that it may have been: before
// another server can take it. Work is started again whenever the lease is
// taken again. A store that is not a store.Leaser runs work once, until
// ctx ends.
func Run(ctx context.Context, st store.Store, name, holder string, ttl time.Duration, log *slog.Logger, work func(ctx context.Context)) {
	leaser, ok := st.(store.Leaser)
	if !ok {
		work(ctx)
		return
	}
	renew := ttl / 3
	wait := time.NewTimer(0)
	defer wait.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-wait.C:
		}
		asked := time.Now()
		token, held, err := leaser.AcquireLease(ctx, name, holder, ttl)
		if err != nil && ctx.Err() == nil {
			log.Warn("could not take a lease", "lease", name, "error", err)
		}
		if held {
			log.Info("took a lease; running its work", "lease", name, "token", token)
			hold(ctx, leaser, name, holder, ttl, token, asked, log, work)
			release, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = leaser.ReleaseLease(release, name, holder)
			cancel()
		}
		wait.Reset(renew)
	}
}

// hold runs work under the lease taken with token at asked, renewing it,
// until ctx ends or the lease is lost.
func hold(ctx context.Context, leaser store.Leaser, name, holder string, ttl time.Duration, token int64, asked time.Time,
	log *slog.Logger, work func(ctx context.Context)) {
	wctx, stop := context.WithCancel(store.WithFence(ctx, store.Fence{Lease: name, Token: token}))
	done := make(chan struct{})
	go func() {
		defer close(done)
		work(wctx)
	}()
	defer func() {
		stop()
		<-done
	}()
	// The lease is surely ours until asked+ttl (Redis counted from later).
	// Renewal failing that long stops the work a renewal early, while
	// the lease is still ours.
	until := asked.Add(ttl)
	renew := ttl / 3
	tick := time.NewTicker(renew)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-done:
			return
		case <-tick.C:
		}
		asked := time.Now()
		got, held, err := leaser.AcquireLease(ctx, name, holder, ttl)
		switch {
		case err == nil && held && got == token:
			until = asked.Add(ttl)
		case err == nil:
			log.Warn("lost a lease; stopping its work", "lease", name, "token", token)
			return
		case time.Until(until) < renew:
			log.Warn("could not renew a lease before it may expire; stopping its work", "lease", name, "error", err)
			return
		}
	}
}
