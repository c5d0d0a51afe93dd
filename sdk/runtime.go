package sdk

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/pawlcfg/pawl/validators/host"
)

// validatorIdle is how long a loaded validator stays in memory unused. A
// validator runs when a release is applied, which is rare: an idle one
// gives back its compiled code and instances (tens of MiB for a Go
// module), and the next apply loads it again from the compilation cache.
const validatorIdle = 30 * time.Second

// sharedRuntime is one validator runtime shared by every Client of the
// process with the same compilation cache directory and validator limit: each module is
// compiled once per process however many clients run it, and its
// instances are pooled. Validators unused for validatorIdle are closed.
// The runtime closes when its last client closes.
type sharedRuntime struct {
	key  runtimeKey
	refs int // guarded by runtimes.mu
	rt   *host.Runtime
	stop chan struct{} // ends the janitor
	done chan struct{}

	mu     sync.Mutex
	loaded map[string]*loading // by module digest
}

// loading is a module being loaded, or loaded: done is closed when v or
// err is set. users counts the applies holding it; idleSince is when the
// last let go.
type loading struct {
	done      chan struct{}
	v         *host.Validator
	err       error
	users     int
	idleSince time.Time
}

var runtimes = struct {
	mu sync.Mutex
	m  map[runtimeKey]*sharedRuntime
}{m: map[runtimeKey]*sharedRuntime{}}

// runtimeKey is what clients must agree on to share a runtime.
type runtimeKey struct {
	dir   string
	limit time.Duration
}

// acquireRuntime returns the process's runtime for the compilation cache
// directory dir ("" for none) and the validation limit, starting it if
// needed.
func acquireRuntime(ctx context.Context, dir string, limit time.Duration) (*sharedRuntime, error) {
	runtimes.mu.Lock()
	defer runtimes.mu.Unlock()
	key := runtimeKey{dir: dir, limit: limit}
	if r := runtimes.m[key]; r != nil {
		r.refs++
		return r, nil
	}
	opts := []host.Option{host.WithTimeout(limit)}
	if dir != "" {
		opts = append(opts, host.WithCacheDir(dir))
	}
	rt, err := host.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("sdk: start the validator runtime: %w", err)
	}
	r := &sharedRuntime{key: key, refs: 1, rt: rt, loaded: map[string]*loading{}, stop: make(chan struct{}), done: make(chan struct{})}
	runtimes.m[key] = r
	go r.janitor()
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
	close(r.stop)
	<-r.done
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

// janitor closes validators idle for validatorIdle, until the runtime
// closes.
func (r *sharedRuntime) janitor() {
	defer close(r.done)
	t := time.NewTicker(validatorIdle / 4)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case now := <-t.C:
			r.closeIdle(now.Add(-validatorIdle))
		}
	}
}

// closeIdle closes the validators nobody used since before.
func (r *sharedRuntime) closeIdle(before time.Time) {
	r.mu.Lock()
	var idle []*host.Validator
	for digest, l := range r.loaded {
		select {
		case <-l.done:
		default:
			continue
		}
		if l.v != nil && l.users == 0 && l.idleSince.Before(before) {
			idle = append(idle, l.v)
			delete(r.loaded, digest)
		}
	}
	r.mu.Unlock()
	for _, v := range idle {
		_ = v.Close(context.Background())
	}
}

// take returns the loaded validator of digest, held until release is
// called, or nil when it is not loaded.
func (r *sharedRuntime) take(digest string) (*host.Validator, func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.loaded[digest]
	if l == nil {
		return nil, nil
	}
	select {
	case <-l.done:
	default:
		return nil, nil
	}
	if l.v == nil {
		return nil, nil
	}
	l.users++
	return l.v, r.releaser(l)
}

func (r *sharedRuntime) releaser(l *loading) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			l.users--
			l.idleSince = time.Now()
			r.mu.Unlock()
		})
	}
}

// load returns the validator of module wasm, which must hash to digest,
// compiling it only when the process has not loaded it yet; it is held
// until release is called. A failed load is not kept: the next call tries
// again.
func (r *sharedRuntime) load(ctx context.Context, digest string, wasm []byte) (*host.Validator, func(), error) {
	r.mu.Lock()
	l := r.loaded[digest]
	if l == nil {
		l = &loading{done: make(chan struct{}), users: 1}
		r.loaded[digest] = l
		r.mu.Unlock()
		l.v, l.err = r.rt.Load(ctx, digest, wasm)
		r.mu.Lock()
		if l.err != nil && r.loaded != nil && r.loaded[digest] == l {
			delete(r.loaded, digest)
		}
		r.mu.Unlock()
		close(l.done)
		if l.err != nil {
			return nil, nil, l.err
		}
		return l.v, r.releaser(l), nil
	}
	l.users++
	r.mu.Unlock()
	select {
	case <-l.done:
	case <-ctx.Done():
		r.releaser(l)()
		return nil, nil, ctx.Err()
	}
	if l.err != nil {
		return nil, nil, l.err
	}
	return l.v, r.releaser(l), nil
}
