// Package host runs Pawl validators: WebAssembly modules that follow ABI v1
// (validators/ABI.md), in wazero, sandboxed. The server and the SDK both use
// it, so a config is judged by the same code in both places. It imports
// neither.
//
// A Runtime reads each module's sections before compiling it (internal
// package wasmcheck), refusing one outside ABI v1 or over ModuleLimits, so
// that a compile bomb never reaches wazero's compiler; it compiles each
// module once (with an optional compilation cache on disk, so a restart
// does not recompile), a bounded number at a time, within a time limit,
// stopping when no caller waits; it keeps a pool of instances per module
// for concurrent calls, all pools within one memory budget, and bounds
// every call: memory (64 MiB by default), time (1s, enforced by closing
// the instance when the deadline passes) and output size (1 MiB). An
// instance that traps, runs out of time or memory, or misbehaves in any
// way is discarded, never reused. docs/LIMITS.md lists every limit.
//
// Modules get no files, no network, no environment and no arguments; their
// clocks are fixed and their randomness is a fixed stream, so a validation
// is deterministic.
package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/pawlcfg/pawl/validators/abi"
	"github.com/pawlcfg/pawl/validators/host/internal/wasmcheck"
)

// ABIVersion is the validator ABI this package runs.
const ABIVersion = abi.Version

// Digest returns the content address of module bytes: "sha256:<hex>".
func Digest(wasm []byte) string {
	sum := sha256.Sum256(wasm)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Runtime compiles and runs validators. It is safe for concurrent use;
// Close releases everything it compiled and instantiated.
//
// Before compiling, Load reads the module's sections (imports, exports and
// shape) and refuses one outside ABI v1 or over the ModuleLimits without
// compiling it. Compilations are bounded in number (WithMaxCompiles) and
// time (WithCompileTimeout); one module is compiled once at a time, however
// many callers load it, and a compilation no caller waits for any more
// stops. Instances of all modules share one memory budget
// (WithMemoryBudget).
type Runtime struct {
	rt    wazero.Runtime
	cache wazero.CompilationCache
	opts  options

	// cacheDir is the compilation cache's directory, and tempCache says
	// the runtime made it for its compile process and removes it on Close.
	cacheDir  string
	tempCache bool

	// ctx ends when the runtime closes, stopping its compilations; wg
	// counts the goroutines that run them.
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup

	compileSlots chan struct{} // one token per running compilation
	memory       chan struct{} // one token per instance, of the memory limit each
	memWaiters   atomic.Int32  // calls waiting for a token of memory
	compiles     atomic.Int64  // compilations started
	peak         atomic.Int64  // most instances at once

	mu         sync.Mutex
	closed     bool
	flights    map[string]*flight      // running compilations, by digest
	validators map[*Validator]struct{} // loaded, whose idle instances may be evicted
	children   map[int]struct{}        // pids of running compile processes
}

// New starts a runtime.
func New(ctx context.Context, opts ...Option) (*Runtime, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	cfg := runtimeConfig(o.memoryLimit)
	r := &Runtime{
		opts:         o,
		compileSlots: make(chan struct{}, o.compiles),
		memory:       make(chan struct{}, o.budget/o.memoryLimit),
		flights:      map[string]*flight{},
		validators:   map[*Validator]struct{}{},
		children:     map[int]struct{}{},
		cacheDir:     o.cacheDir,
	}
	r.ctx, r.stop = context.WithCancel(context.WithoutCancel(ctx))
	if r.cacheDir == "" && o.compileProcess != nil {
		dir, err := os.MkdirTemp("", "pawl-wasm-cache-") // 0700
		if err != nil {
			r.stop()
			return nil, fmt.Errorf("validator: compilation cache for the compile process: %w", err)
		}
		r.cacheDir, r.tempCache = dir, true
	}
	if r.cacheDir != "" {
		// The cache holds native code the runtime runs unchecked: only this
		// process's user may be able to change it, before and after wazero
		// makes its directory in it.
		fail := func(err error) (*Runtime, error) {
			r.stop()
			if r.tempCache {
				_ = os.RemoveAll(r.cacheDir)
			}
			return nil, err
		}
		dir, err := prepareCacheDir(r.cacheDir)
		if err != nil {
			return fail(err)
		}
		r.cacheDir = dir
		cache, err := wazero.NewCompilationCacheWithDir(dir)
		if err != nil {
			return fail(fmt.Errorf("validator: compilation cache in %s: %w", dir, err))
		}
		if err := checkEntries(dir); err != nil {
			_ = cache.Close(ctx)
			return fail(err)
		}
		r.cache = cache
		cfg = cfg.WithCompilationCache(cache)
	}
	r.rt = wazero.NewRuntimeWithConfig(ctx, cfg)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, r.rt); err != nil {
		_ = r.Close(ctx)
		return nil, fmt.Errorf("validator: instantiate WASI: %w", err)
	}
	return r, nil
}

// runtimeConfig is the configuration of a runtime's wazero runtime, and of
// its compile process: what the compilation cache keys entries by (wazero
// hashes in whether calls end with their context) must not differ between
// the two, or the runtime would compile again what the child compiled.
func runtimeConfig(memoryLimit int) wazero.RuntimeConfig {
	return wazero.NewRuntimeConfig().
		WithCloseOnContextDone(true).
		WithMemoryLimitPages(uint32(memoryLimit / wasmPageSize))
}

// Close stops the runtime's compilations, waits for them, and closes every
// validator loaded by r and the runtime itself.
func (r *Runtime) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	r.stop()
	r.wg.Wait()
	var err error
	if r.rt != nil {
		err = r.rt.Close(ctx)
	}
	if r.cache != nil {
		err = errors.Join(err, r.cache.Close(ctx))
	}
	if r.tempCache {
		err = errors.Join(err, os.RemoveAll(r.cacheDir))
	}
	return err
}

// Stats are counters of a runtime's work, for tests and metrics.
type Stats struct {
	// Compiles is how many compilations started.
	Compiles int64
	// Compiling is how many are running.
	Compiling int
	// CompileWaiters is how many Loads wait for a running compilation.
	CompileWaiters int
	// Instances is how many instances exist, of all modules.
	Instances int
	// PeakInstances is the most that existed at once.
	PeakInstances int64
	// MaxInstances is how many the memory budget allows.
	MaxInstances int
	// CompileProcesses are the pids of the running compile processes
	// (WithCompileProcess).
	CompileProcesses []int
}

// Stats returns the runtime's counters.
func (r *Runtime) Stats() Stats {
	r.mu.Lock()
	waiters := 0
	for _, f := range r.flights {
		waiters += f.waiters
	}
	var pids []int
	for pid := range r.children {
		pids = append(pids, pid)
	}
	r.mu.Unlock()
	slices.Sort(pids)
	return Stats{
		CompileWaiters: waiters,
		Compiles:       r.compiles.Load(),
		Compiling:      len(r.compileSlots),
		Instances:      len(r.memory),
		PeakInstances:  r.peak.Load(),
		MaxInstances:   cap(r.memory),

		CompileProcesses: pids,
	}
}

const wasmPageSize = 64 << 10

// Info describes a loaded module.
type Info struct {
	// Digest is the module's content address.
	Digest string
	// ABIVersion is what the module's pawl_abi_version returned.
	ABIVersion int
	// Size is the module's size in bytes.
	Size int
}

// Load verifies that wasm hashes to digest, reads its sections and checks
// its imports, exports and shape against ABI v1 and the ModuleLimits,
// compiles it, instantiates it once to read its ABI version, and returns a
// Validator ready for calls. The caller must Close it.
//
// Cancelling ctx returns at once; the compilation goes on only while
// another Load of the same digest waits for it. Errors: ErrDigestMismatch,
// ErrNotWasm, *ABIError, *LimitError, ErrClosed, or ctx's error.
func (r *Runtime) Load(ctx context.Context, digest string, wasm []byte) (*Validator, error) {
	if got := Digest(wasm); got != digest {
		return nil, fmt.Errorf("%w: the bytes hash to %s, not %s", ErrDigestMismatch, got, digest)
	}
	if err := r.check(wasm); err != nil {
		return nil, err
	}
	compiled, err := r.compile(ctx, digest, wasm)
	if err != nil {
		return nil, err
	}
	v := &Validator{
		r:        r,
		compiled: compiled,
		info:     Info{Digest: digest, Size: len(wasm)},
		slots:    make(chan struct{}, r.opts.poolSize),
		idle:     make(chan *instance, r.opts.poolSize),
	}
	inst, err := v.instantiate(ctx)
	if err != nil {
		compiled.release(ctx)
		return nil, err
	}
	version, err := inst.abiVersion(ctx, r.opts.timeout)
	if err != nil {
		inst.close(ctx)
		compiled.release(ctx)
		return nil, err
	}
	if version != ABIVersion {
		inst.close(ctx)
		compiled.release(ctx)
		msg := fmt.Sprintf("pawl_abi_version returned %d; this host runs ABI %d", version, ABIVersion)
		return nil, &ABIError{Problems: []string{msg}, Version: msg}
	}
	v.info.ABIVersion = version
	r.mu.Lock()
	r.validators[v] = struct{}{}
	r.mu.Unlock()
	v.idle <- inst
	return v, nil
}

// Check reads wasm's sections without compiling it, as Load does first:
// its shape against the ModuleLimits, then its imports and exports against
// ABI v1. It neither compiles nor runs anything. Errors: ErrNotWasm, a
// *LimitError, or an *ABIError.
func (r *Runtime) Check(wasm []byte) error { return r.check(wasm) }

// check reads wasm's sections without compiling it: its shape against the
// limits, then its imports and exports against ABI v1.
func (r *Runtime) check(wasm []byte) error {
	m, err := wasmcheck.Scan(wasm, r.opts.limits)
	var limit *wasmcheck.LimitError
	switch {
	case errors.As(err, &limit):
		return &LimitError{Limit: limit.Limit, Msg: limit.Error(), Max: uint64(limit.Max), Got: limit.Got}
	case err != nil:
		return fmt.Errorf("%w: %v", ErrNotWasm, err)
	}
	return checkABI(m)
}

// allowedImports is the WASI subset a validator may import. Files are
// allowed by name only because the Go toolchain imports them statically:
// the host preopens no directory, so every path operation fails. Sockets are
// not in the list, nor is any module other than WASI.
var allowedImports = map[string]bool{
	"args_get": true, "args_sizes_get": true, "environ_get": true, "environ_sizes_get": true,
	"clock_res_get": true, "clock_time_get": true, "random_get": true,
	"proc_exit": true, "sched_yield": true, "poll_oneoff": true,
	"fd_write": true, "fd_read": true, "fd_close": true, "fd_seek": true, "fd_tell": true,
	"fd_fdstat_get": true, "fd_fdstat_set_flags": true, "fd_filestat_get": true,
	"fd_prestat_get": true, "fd_prestat_dir_name": true, "fd_readdir": true,
	"fd_pread": true, "fd_pwrite": true, "fd_sync": true, "fd_datasync": true,
	"path_open": true, "path_filestat_get": true, "path_readlink": true,
	"path_create_directory": true, "path_remove_directory": true, "path_unlink_file": true,
	"path_rename": true, "path_symlink": true, "path_link": true,
	"path_filestat_set_times": true, "fd_filestat_set_size": true, "fd_filestat_set_times": true,
}

// requiredExports are ABI v1's functions with their signatures.
var requiredExports = map[string]wasmcheck.FuncType{
	"pawl_abi_version": {Results: []wasmcheck.ValueType{wasmcheck.I32}},
	"pawl_alloc":       {Params: []wasmcheck.ValueType{wasmcheck.I32}, Results: []wasmcheck.ValueType{wasmcheck.I32}},
	"pawl_validate":    {Params: []wasmcheck.ValueType{wasmcheck.I32, wasmcheck.I32}, Results: []wasmcheck.ValueType{wasmcheck.I64}},
}

// checkABI compares a module's imports and exports with ABI v1: only
// functions of the allowed WASI subset imported, the three functions and
// the memory exported.
func checkABI(m *wasmcheck.Module) error {
	imports, exports := checkImports(m), checkExports(m)
	if len(imports)+len(exports) > 0 {
		return &ABIError{Problems: slices.Concat(imports, exports), Imports: imports, Exports: exports}
	}
	return nil
}

// checkImports lists the module's imports outside the allowed WASI subset.
func checkImports(m *wasmcheck.Module) []string {
	var problems []string
	for _, im := range m.Imports {
		switch {
		case im.Kind == wasmcheck.KindMemory:
			problems = append(problems, "the module imports a memory; it must define and export its own")
		case im.Kind != wasmcheck.KindFunc:
			problems = append(problems, fmt.Sprintf("import %s.%s (a %s) is not allowed", im.Module, im.Name, im.Kind))
		case im.Module != wasi_snapshot_preview1.ModuleName || !allowedImports[im.Name]:
			problems = append(problems, fmt.Sprintf("import %s.%s is not allowed", im.Module, im.Name))
		}
	}
	return problems
}

// checkExports lists the exports of ABI v1 that the module lacks or
// exports with another signature.
func checkExports(m *wasmcheck.Module) []string {
	var problems []string
	funcs := map[string]wasmcheck.FuncType{}
	memory := false
	for _, ex := range m.Exports {
		switch ex.Kind {
		case wasmcheck.KindFunc:
			funcs[ex.Name] = ex.Type
		case wasmcheck.KindMemory:
			memory = memory || ex.Name == "memory"
		}
	}
	for _, name := range []string{"pawl_abi_version", "pawl_alloc", "pawl_validate"} {
		want := requiredExports[name]
		f, ok := funcs[name]
		switch {
		case !ok:
			problems = append(problems, "export "+name+" is missing")
		case !slices.Equal(f.Params, want.Params) || !slices.Equal(f.Results, want.Results):
			problems = append(problems, fmt.Sprintf("export %s has signature %v -> %v, want %v -> %v",
				name, typeNames(f.Params), typeNames(f.Results), typeNames(want.Params), typeNames(want.Results)))
		}
	}
	if !memory {
		problems = append(problems, "export memory is missing")
	}
	return problems
}

func typeNames(ts []wasmcheck.ValueType) string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.String()
	}
	return "(" + strings.Join(names, ", ") + ")"
}

// fixedTime is what a validator's clocks read: validations must not depend
// on when they run.
var fixedTime = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// zeroReader is the module's randomness: a fixed stream.
type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

var _ io.Reader = zeroReader{}
