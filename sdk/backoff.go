package sdk

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"connectrpc.com/connect"
)

// backoff is exponential backoff with full jitter: the n-th wait is
// uniform in [0, min(max, min·2ⁿ)], so that a fleet that lost its server
// does not come back in step.
type backoff struct {
	min, max time.Duration
	attempt  int
}

// wait sleeps the next wait, or returns false when ctx ends first.
func (b *backoff) wait(ctx context.Context) bool {
	ceiling := b.min << min(b.attempt, 30)
	if ceiling > b.max || ceiling <= 0 {
		ceiling = b.max
	}
	b.attempt++
	return sleepCtx(ctx, rand.N(ceiling)+1)
}

// sleepCtx waits for d, or returns false when ctx ends first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// reset starts again from the shortest wait, after a success.
func (b *backoff) reset() { b.attempt = 0 }

func (c *Client) newBackoff() *backoff {
	return &backoff{min: c.cfg.backoffMin, max: c.cfg.backoffMax}
}

// permanent reports whether a call failed in a way a retry cannot fix.
func permanent(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument, connect.CodeNotFound, connect.CodeAlreadyExists, connect.CodePermissionDenied,
		connect.CodeFailedPrecondition, connect.CodeUnauthenticated, connect.CodeUnimplemented, connect.CodeOutOfRange:
		return true
	}
	return false
}

// retry calls fn until it succeeds, fails permanently, or ctx ends,
// waiting between attempts.
func (c *Client) retry(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	b := c.newBackoff()
	for {
		err := fn(ctx)
		if err == nil || permanent(err) {
			return err
		}
		if ctx.Err() != nil {
			return errors.Join(ctx.Err(), err)
		}
		c.cfg.log.Debug("pawl: retrying", "what", what, "error", err)
		if !b.wait(ctx) {
			return errors.Join(ctx.Err(), err)
		}
	}
}
