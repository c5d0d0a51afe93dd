package host

import (
	"context"
	"fmt"
	"time"
)

// acquireMemory takes a token of the memory budget for a new instance. When
// none is free it discards an idle instance of any module; when there is
// none either, it waits for a token for at most the call time limit.
func (r *Runtime) acquireMemory(ctx context.Context) error {
	r.memWaiters.Add(1)
	defer r.memWaiters.Add(-1)
	var timer *time.Timer
	for {
		select {
		case r.memory <- struct{}{}:
			r.notePeak()
			return nil
		default:
		}
		if r.evictIdle() {
			continue
		}
		if timer == nil {
			timer = time.NewTimer(r.opts.timeout)
			defer timer.Stop()
		}
		select {
		case r.memory <- struct{}{}:
			r.notePeak()
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			return &LimitError{Limit: LimitMemoryBudget, Msg: fmt.Sprintf(
				"no validator instance was free within %s: all %d that the memory budget of %d MiB allows (%d MiB each) are running; retry later",
				r.opts.timeout, cap(r.memory), r.opts.budget>>20, r.opts.memoryLimit>>20), Max: uint64(cap(r.memory)), Got: uint64(cap(r.memory))}
		}
	}
}

// evictIdle closes one idle instance of any loaded module, giving its token
// back, and reports whether it found one.
func (r *Runtime) evictIdle() bool {
	r.mu.Lock()
	var victim *instance
	for v := range r.validators {
		select {
		case victim = <-v.idle:
		default:
			continue
		}
		break
	}
	r.mu.Unlock()
	if victim == nil {
		return false
	}
	victim.close(context.Background())
	return true
}

// notePeak records the number of instances if it is the most so far.
func (r *Runtime) notePeak() {
	n := int64(len(r.memory))
	for {
		peak := r.peak.Load()
		if n <= peak || r.peak.CompareAndSwap(peak, n) {
			return
		}
	}
}
