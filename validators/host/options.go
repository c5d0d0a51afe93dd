package host

import (
	"fmt"
	"runtime"
	"time"

	"github.com/pawlcfg/pawl/validators/host/internal/wasmcheck"
)

// Option configures New.
type Option func(*options)

type options struct {
	memoryLimit int
	timeout     time.Duration
	maxOutput   int
	poolSize    int
	cacheDir    string
	limits      ModuleLimits
	compileTime time.Duration
	compiles    int
	budget      int

	// compileProcess is the argv of the compile process, nil to compile
	// in process; compileEnv its environment.
	compileProcess []string
	compileEnv     []string
}

// ModuleLimits bound the shape of a module, checked before it is compiled.
// A zero field means no limit.
type ModuleLimits = wasmcheck.Limits

// DefaultModuleLimits are generous for real modules and stop compile bombs.
// The Go example validators (3-6 MB) define at most 3,307 functions, of
// at most 20 locals, 51 KB, 2,620 blocks (control constructs, else, br_if
// and br_table targets) and 26,622 block joins, all at least 4 times below
// these limits. wazero's compiler takes time that grows with a
// function's blocks squared times its locals, and cannot stop within a
// function: 40,000 empty if/else diamonds with 2 locals took two minutes,
// 5,000 locals across 8,000 of them 4 GB, 20 locals in 10,000 nested loops
// six minutes. On a 2-core machine the costliest function these limits
// allow (8 locals across 10,500 nested ifs, or one block left by 10,500
// br_if) compiles in 6-8s of CPU and under 100 MB (docs/LIMITS.md).
var DefaultModuleLimits = ModuleLimits{
	Functions:      100_000,
	FunctionLocals: 5_000,
	Locals:         1_000_000,
	FunctionBytes:  1 << 20,
	CodeBytes:      32 << 20,
	LoopDepth:      32,
	LoopJoins:      10_000,
	Blocks:         10_500,
	BlockJoins:     110_000,
}

const (
	// DefaultMemoryLimit bounds each instance's linear memory.
	DefaultMemoryLimit = 64 << 20
	// DefaultTimeout bounds each call: config validation is a fast check,
	// and a second is long enough for a JSON Schema over a large document.
	DefaultTimeout = time.Second
	// DefaultMaxOutput bounds a result: violations, not a copy of the config.
	DefaultMaxOutput = 1 << 20
	// DefaultMaxModuleBytes is the largest module a server accepts at
	// upload unless told otherwise (pawld --max-validator-bytes): the Go
	// examples are 3-6 MB.
	DefaultMaxModuleBytes = 16 << 20
	// DefaultCompileTimeout bounds one module's compilation. The 6 MB Go
	// example compiles in 9s on a 2-core machine under a load of 8; the
	// limit leaves room for a 16 MB module there. Compilation stops between
	// functions, and DefaultModuleLimits keep each function's share to
	// seconds.
	DefaultCompileTimeout = 2 * time.Minute
	// DefaultMemoryBudget bounds the memory of all instances of all modules
	// together, counted as instances times the memory limit: 16 instances
	// of 64 MiB.
	DefaultMemoryBudget = 1 << 30
)

func defaultOptions() options {
	return options{
		memoryLimit: DefaultMemoryLimit,
		timeout:     DefaultTimeout,
		maxOutput:   DefaultMaxOutput,
		// One instance per core keeps every core busy; more only costs
		// memory (a Go module's instance holds a few MiB).
		poolSize: runtime.GOMAXPROCS(0),
		limits:   DefaultModuleLimits,
		// A compilation runs on two cores (so that it can stop between
		// functions); half the cores compile, the rest keep validating.
		compiles:    max(1, runtime.GOMAXPROCS(0)/2),
		compileTime: DefaultCompileTimeout,
		budget:      DefaultMemoryBudget,
	}
}

func (o options) validate() error {
	switch {
	case o.memoryLimit < wasmPageSize || o.memoryLimit%wasmPageSize != 0:
		return fmt.Errorf("validator: WithMemoryLimit(%d): must be a positive multiple of 64 KiB", o.memoryLimit)
	case o.timeout <= 0:
		return fmt.Errorf("validator: WithTimeout(%s): must be positive", o.timeout)
	case o.maxOutput <= 0:
		return fmt.Errorf("validator: WithMaxOutput(%d): must be positive", o.maxOutput)
	case o.poolSize <= 0:
		return fmt.Errorf("validator: WithPoolSize(%d): must be positive", o.poolSize)
	case o.compileTime <= 0:
		return fmt.Errorf("validator: WithCompileTimeout(%s): must be positive", o.compileTime)
	case o.compiles <= 0:
		return fmt.Errorf("validator: WithMaxCompiles(%d): must be positive", o.compiles)
	case o.compileProcess != nil && len(o.compileProcess) == 0:
		return fmt.Errorf("validator: WithCompileProcess: argv is empty")
	case o.budget < o.memoryLimit:
		return fmt.Errorf("validator: WithMemoryBudget(%d): must hold at least one instance of the memory limit (%d bytes)", o.budget, o.memoryLimit)
	}
	l := o.limits
	if min(l.Functions, l.FunctionLocals, l.Locals, l.FunctionBytes, l.CodeBytes, l.LoopDepth, l.LoopJoins, l.Blocks, l.BlockJoins) < 0 {
		return fmt.Errorf("validator: WithModuleLimits(%+v): limits must be 0 (none) or positive", l)
	}
	return nil
}

// WithMemoryLimit bounds each instance's memory, in bytes (a multiple of
// 64 KiB; default 64 MiB).
func WithMemoryLimit(n int) Option { return func(o *options) { o.memoryLimit = n } }

// WithTimeout bounds each call (default 1s).
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithMaxOutput bounds a call's result, in bytes (default 1 MiB).
func WithMaxOutput(n int) Option { return func(o *options) { o.maxOutput = n } }

// WithPoolSize sets how many instances of one module may run at once
// (default GOMAXPROCS).
func WithPoolSize(n int) Option { return func(o *options) { o.poolSize = n } }

// WithCacheDir keeps compiled code in dir, so that a restart does not
// compile the same modules again. New makes dir (mode 0700) if it does not
// exist, and refuses it with ErrUnsafeCacheDir unless only this process's
// user can change what it holds: on Unix, dir owned by the user and not
// writable by group or others, its ancestors owned by the user or root
// and not writable by group or others unless sticky (/tmp), and the
// compiled code in it owned by the user and writable by nobody else.
// Processes of one user may share dir.
func WithCacheDir(dir string) Option { return func(o *options) { o.cacheDir = dir } }

// WithModuleLimits bounds the shape of the modules Load accepts (default
// DefaultModuleLimits), checked before compiling.
func WithModuleLimits(l ModuleLimits) Option { return func(o *options) { o.limits = l } }

// WithCompileTimeout bounds one module's compilation (default 2 minutes).
func WithCompileTimeout(d time.Duration) Option { return func(o *options) { o.compileTime = d } }

// WithMaxCompiles sets how many modules may compile at once (default half
// of GOMAXPROCS, at least 1); a Load beyond waits for a turn for at most
// the compile timeout.
func WithMaxCompiles(n int) Option { return func(o *options) { o.compiles = n } }

// WithMemoryBudget bounds the memory of all instances of all modules of the
// runtime, in bytes (default 1 GiB): at most budget / memory limit
// instances exist at once. A call that finds none free, and no idle
// instance to discard, waits for at most its time limit and then fails
// with a *LimitError.
func WithMemoryBudget(n int) Option { return func(o *options) { o.budget = n } }
