// Package host runs Pawl validators: WebAssembly modules that follow ABI v1
// (validators/ABI.md), in wazero, sandboxed. The server and the SDK both use
// it, so a config is judged by the same code in both places. It imports
// neither.
//
// A Runtime compiles each module once (with an optional compilation cache
// on disk, so a restart does not recompile), keeps a pool of instances per
// module for concurrent calls, and bounds every call: memory (64 MiB by
// default), time (1s, enforced by closing the instance when the deadline
// passes) and output size (1 MiB). An instance that traps, runs out of time
// or memory, or misbehaves in any way is discarded, never reused.
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
	"strings"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/pawlcfg/pawl/validators/abi"
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
type Runtime struct {
	rt    wazero.Runtime
	cache wazero.CompilationCache
	opts  options

	mu     sync.Mutex
	closed bool
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
	cfg := wazero.NewRuntimeConfig().
		WithCloseOnContextDone(true).
		WithMemoryLimitPages(uint32(o.memoryLimit / wasmPageSize))
	r := &Runtime{opts: o}
	if o.cacheDir != "" {
		cache, err := wazero.NewCompilationCacheWithDir(o.cacheDir)
		if err != nil {
			return nil, fmt.Errorf("validator: compilation cache in %s: %w", o.cacheDir, err)
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

// Close closes every validator loaded by r and the runtime itself.
func (r *Runtime) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	var err error
	if r.rt != nil {
		err = r.rt.Close(ctx)
	}
	if r.cache != nil {
		err = errors.Join(err, r.cache.Close(ctx))
	}
	return err
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

// Load verifies that wasm hashes to digest, compiles it, checks its imports
// and exports against ABI v1, instantiates it once to read its ABI version,
// and returns a Validator ready for calls. The caller must Close it.
func (r *Runtime) Load(ctx context.Context, digest string, wasm []byte) (*Validator, error) {
	if got := Digest(wasm); got != digest {
		return nil, fmt.Errorf("%w: the bytes hash to %s, not %s", ErrDigestMismatch, got, digest)
	}
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	compiled, err := r.rt.CompileModule(ctx, wasm)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotWasm, err)
	}
	if err := checkABI(compiled); err != nil {
		_ = compiled.Close(ctx)
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
		_ = compiled.Close(ctx)
		return nil, err
	}
	version, err := inst.abiVersion(ctx, r.opts.timeout)
	if err != nil {
		inst.close(ctx)
		_ = compiled.Close(ctx)
		return nil, err
	}
	if version != ABIVersion {
		inst.close(ctx)
		_ = compiled.Close(ctx)
		return nil, &ABIError{Problems: []string{fmt.Sprintf("pawl_abi_version returned %d; this host runs ABI %d", version, ABIVersion)}}
	}
	v.info.ABIVersion = version
	v.idle <- inst
	return v, nil
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
var requiredExports = map[string]struct{ params, results []api.ValueType }{
	"pawl_abi_version": {nil, []api.ValueType{api.ValueTypeI32}},
	"pawl_alloc":       {[]api.ValueType{api.ValueTypeI32}, []api.ValueType{api.ValueTypeI32}},
	"pawl_validate":    {[]api.ValueType{api.ValueTypeI32, api.ValueTypeI32}, []api.ValueType{api.ValueTypeI64}},
}

func checkABI(m wazero.CompiledModule) error {
	var problems []string
	for _, f := range m.ImportedFunctions() {
		mod, name, _ := f.Import()
		if mod != wasi_snapshot_preview1.ModuleName || !allowedImports[name] {
			problems = append(problems, fmt.Sprintf("import %s.%s is not allowed", mod, name))
		}
	}
	if len(m.ImportedMemories()) > 0 {
		problems = append(problems, "the module imports a memory; it must define and export its own")
	}
	exports := m.ExportedFunctions()
	for _, name := range []string{"pawl_abi_version", "pawl_alloc", "pawl_validate"} {
		want := requiredExports[name]
		f, ok := exports[name]
		switch {
		case !ok:
			problems = append(problems, "export "+name+" is missing")
		case !sameTypes(f.ParamTypes(), want.params) || !sameTypes(f.ResultTypes(), want.results):
			problems = append(problems, fmt.Sprintf("export %s has signature %v -> %v, want %v -> %v",
				name, typeNames(f.ParamTypes()), typeNames(f.ResultTypes()), typeNames(want.params), typeNames(want.results)))
		}
	}
	if _, ok := m.ExportedMemories()["memory"]; !ok {
		problems = append(problems, "export memory is missing")
	}
	if len(problems) > 0 {
		return &ABIError{Problems: problems}
	}
	return nil
}

func sameTypes(a, b []api.ValueType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func typeNames(ts []api.ValueType) string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = api.ValueTypeName(t)
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
