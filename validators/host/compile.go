package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental"
)

// compileWorkers is how many goroutines compile one module. wazero checks
// the context between functions only when it compiles with more than one
// (experimental.WithCompilationWorkers), so two is what makes a compilation
// stop soon after its caller goes: within one function's compile time,
// which ModuleLimits bound.
const compileWorkers = 2

// flight is one running compilation, shared by every Load of its digest.
// Its fields after done closes are read-only; waiters is guarded by
// Runtime.mu.
type flight struct {
	done    chan struct{}
	cancel  context.CancelFunc
	waiters int // Loads waiting for it; when the last goes, it is cancelled

	compiled *compiledModule // set with done, nil on error
	err      error
}

// compiledModule is a compiled module shared by the Validators loaded from
// one compilation: the last release closes it.
type compiledModule struct {
	r    *Runtime
	mod  wazero.CompiledModule
	refs int // guarded by r.mu
}

// release drops one reference, closing the module with the last.
func (c *compiledModule) release(ctx context.Context) {
	c.r.mu.Lock()
	c.refs--
	last := c.refs == 0
	c.r.mu.Unlock()
	if last {
		_ = c.mod.Close(ctx)
	}
}

// compile returns wasm compiled, sharing a running compilation of the same
// digest. The returned module holds one reference for the caller.
func (r *Runtime) compile(ctx context.Context, digest string, wasm []byte) (*compiledModule, error) {
	f, err := r.join(ctx, digest, wasm)
	if err != nil {
		return nil, err
	}
	select {
	case <-f.done:
	case <-ctx.Done():
		r.mu.Lock()
		select {
		case <-f.done: // finished meanwhile: the result holds a reference for this caller
			r.mu.Unlock()
			if f.compiled != nil {
				f.compiled.release(context.Background())
			}
		default:
			if f.waiters--; f.waiters == 0 {
				f.cancel()
			}
			r.mu.Unlock()
		}
		return nil, ctx.Err()
	}
	return f.compiled, f.err
}

// join adds the caller to the running compilation of digest, or starts one
// when a compilation slot is free within the compile timeout.
func (r *Runtime) join(ctx context.Context, digest string, wasm []byte) (*flight, error) {
	r.mu.Lock()
	if f := r.joinLocked(digest); f != nil || r.closed {
		r.mu.Unlock()
		if f == nil {
			return nil, ErrClosed
		}
		return f, nil
	}
	r.mu.Unlock()
	if err := r.acquireCompileSlot(ctx); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if f := r.joinLocked(digest); f != nil || r.closed { // another caller started it meanwhile
		<-r.compileSlots
		if f == nil {
			return nil, ErrClosed
		}
		return f, nil
	}
	fctx, cancel := context.WithTimeout(r.ctx, r.opts.compileTime)
	f := &flight{done: make(chan struct{}), cancel: cancel, waiters: 1}
	r.flights[digest] = f
	r.compiles.Add(1)
	r.wg.Add(1)
	go r.run(fctx, digest, wasm, f)
	return f, nil
}

// joinLocked adds a waiter to digest's flight, if one runs. The caller
// holds r.mu.
func (r *Runtime) joinLocked(digest string) *flight {
	f := r.flights[digest]
	if f != nil {
		f.waiters++
	}
	return f
}

// run compiles wasm for f and hands the result to the waiters left; it
// owns a compilation slot, which it gives back. Its one exit is the end of
// the compilation, which cancelling fctx (the last waiter leaving, the
// compile timeout, Close) hastens.
func (r *Runtime) run(fctx context.Context, digest string, wasm []byte, f *flight) {
	defer r.wg.Done()
	defer func() { <-r.compileSlots }()
	defer f.cancel()
	began := time.Now()
	mod, err := r.rt.CompileModule(experimental.WithCompilationWorkers(fctx, compileWorkers), wasm)
	switch {
	case err == nil:
	case errors.Is(fctx.Err(), context.DeadlineExceeded):
		err = &LimitError{Limit: LimitCompileTime, Msg: fmt.Sprintf("compiling the module took longer than the %s limit and was stopped", r.opts.compileTime),
			Max: uint64(r.opts.compileTime.Milliseconds()), Got: uint64(time.Since(began).Milliseconds())}
	case fctx.Err() != nil && r.ctx.Err() != nil:
		err = ErrClosed
	case fctx.Err() != nil:
		err = fmt.Errorf("validator: compilation stopped after %s: no caller waits for it: %w", time.Since(began).Round(time.Millisecond), context.Canceled)
	default:
		err = fmt.Errorf("%w: %v", ErrNotWasm, err)
	}
	r.mu.Lock()
	delete(r.flights, digest)
	unwanted := err == nil && f.waiters == 0
	if err == nil && !unwanted {
		f.compiled = &compiledModule{r: r, mod: mod, refs: f.waiters}
	}
	f.err = err
	close(f.done)
	r.mu.Unlock()
	if unwanted {
		_ = mod.Close(context.Background())
	}
}

// acquireCompileSlot waits for a compilation slot for at most the compile
// timeout.
func (r *Runtime) acquireCompileSlot(ctx context.Context) error {
	select {
	case r.compileSlots <- struct{}{}:
		return nil
	default:
	}
	timer := time.NewTimer(r.opts.compileTime)
	defer timer.Stop()
	select {
	case r.compileSlots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-r.ctx.Done():
		return ErrClosed
	case <-timer.C:
		return &LimitError{Limit: LimitCompiles, Msg: fmt.Sprintf("%d compilations are running, the limit, and none finished within %s; retry later", cap(r.compileSlots), r.opts.compileTime),
			Max: uint64(cap(r.compileSlots)), Got: uint64(cap(r.compileSlots))}
	}
}
