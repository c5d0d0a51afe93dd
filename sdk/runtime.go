package sdk

import (
	"context"
	"fmt"
	"sync"

	"github.com/pawlcfg/pawl/validators/host"
)

// sharedRuntime is one validator runtime shared by every Client of the
// process with the same compilation cache directory: each module is
// compiled once per process however many clients run it, and its
// instances are pooled. It closes when its last client closes.
type sharedRuntime struct {
	key  string
	refs int // guarded by runtimes.mu
	rt   *host.Runtime

	mu     sync.Mutex
	loaded map[string]*loading // by module digest
}

// loading is a module being loaded, or loaded: done is closed when v or
// err is set.
type loading struct {
	done chan struct{}
	v    *host.Validator
	err  error
}

var runtimes = struct {
	mu sync.Mutex
	m  map[string]*sharedRuntime
}{m: map[string]*sharedRuntime{}}

// acquireRuntime returns the process's runtime for the compilation cache
// directory dir ("" for none), starting it if needed.
func acquireRuntime(ctx context.Context, dir string) (*sharedRuntime, error) {
	runtimes.mu.Lock()
	defer runtimes.mu.Unlock()
	if r := runtimes.m[dir]; r != nil {
		r.refs++
		return r, nil
	}
	var opts []host.Option
	if dir != "" {
		opts = append(opts, host.WithCacheDir(dir))
	}
	rt, err := host.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("sdk: start the validator runtime: %w", err)
	}
	r := &sharedRuntime{key: dir, refs: 1, rt: rt, loaded: map[string]*loading{}}
	runtimes.m[dir] = r
	return r, nil
}

// releaseRuntime drops one reference to r, closing it with the last.
func releaseRuntime(ctx context.Context, r *sharedRuntime) error {
	runtimes.mu.Lock()
	r.refs--
	last := r.refs == 0
	if last {
		delete(runtimes.m, r.key)
	}
	runtimes.mu.Unlock()
	if !last {
		return nil
	}
	r.mu.Lock()
	loaded := r.loaded
	r.loaded = nil
	r.mu.Unlock()
	var err error
	for _, l := range loaded {
		<-l.done
		if l.v != nil {
			if cerr := l.v.Close(ctx); cerr != nil && err == nil {
				err = cerr
			}
		}
	}
	if cerr := r.rt.Close(ctx); cerr != nil && err == nil {
		err = cerr
	}
	return err
}

// load returns the validator of module wasm, which must hash to digest,
// compiling it only the first time in the process. A failed load is not
// kept: the next call tries again.
func (r *sharedRuntime) load(ctx context.Context, digest string, wasm []byte) (*host.Validator, error) {
	r.mu.Lock()
	l := r.loaded[digest]
	if l == nil {
		l = &loading{done: make(chan struct{})}
		r.loaded[digest] = l
		r.mu.Unlock()
		l.v, l.err = r.rt.Load(ctx, digest, wasm)
		if l.err != nil {
			r.mu.Lock()
			if r.loaded != nil {
				delete(r.loaded, digest)
			}
			r.mu.Unlock()
		}
		close(l.done)
		return l.v, l.err
	}
	r.mu.Unlock()
	select {
	case <-l.done:
		return l.v, l.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// has reports whether the module digest is loaded already.
func (r *sharedRuntime) has(digest string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.loaded[digest]
	if l == nil {
		return false
	}
	select {
	case <-l.done:
		return l.err == nil
	default:
		return false
	}
}
