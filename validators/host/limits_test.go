package host_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pawlcfg/pawl/internal/testkit/wasmbuild"
	"github.com/pawlcfg/pawl/internal/testkit/wasmgen"
	"github.com/pawlcfg/pawl/validators/host"
	"github.com/pawlcfg/pawl/validators/host/internal/wasmcheck"
)

// scanBound is how long refusing a module without compiling it may take:
// reading a few KiB, on a loaded machine under -race. Compiling the bombs
// below takes from seconds to minutes.
const scanBound = 10 * time.Second

// TestModulesAreCheckedBeforeCompiling loads compile bombs, each over one
// limit, and modules that break ABI v1: each is refused, quickly, naming
// what it broke, and nothing was compiled.
func TestModulesAreCheckedBeforeCompiling(t *testing.T) {
	noExports := wasmgen.Bombs(1, 300, 30)
	noExports.Exports = noExports.Exports[:1]
	forbidden := wasmgen.Bombs(1, 300, 30)
	forbidden.Imports = []wasmgen.Import{{Module: "env", Name: "escape", Type: 0}}
	forbidden.Exports = []wasmgen.Export{{Name: "pawl_abi_version", Func: 1}, {Name: "pawl_alloc", Func: 2}, {Name: "pawl_validate", Func: 3}, {Name: "memory", Memory: true}}
	cases := []struct {
		name   string
		limits host.ModuleLimits
		wasm   []byte
		limit  host.Limit // "" for an ABI refusal
		msg    string
	}{
		// 20 locals in 2,000 nested loops: 4s to compile, 10,000 six minutes.
		{"nested loops", host.DefaultModuleLimits, wasmgen.Bomb(20, 2000), host.LimitLoopDepth, "function 2 has 2000 nested loops; the limit is 32"},
		// 2,000 locals in 30 nested loops: seconds.
		{"loops times locals", host.DefaultModuleLimits, wasmgen.Bomb(2000, 30), host.LimitLoopJoins, "function 2 has 60060 loop joins (loops times locals); the limit is 10000"},
		// 2 locals across 40,000 if/else diamonds, 360 KB: minutes.
		{"if/else diamonds", host.DefaultModuleLimits, wasmgen.Branchy(wasmgen.Diamonds, 2, 40_000), host.LimitBlocks,
			"function 2 has 80000 blocks (block, loop, if, else, br_if and br_table targets); the limit is 10500"},
		// 5,000 locals across 8,000 diamonds: GBs.
		{"locals across diamonds", host.DefaultModuleLimits, wasmgen.Branchy(wasmgen.Diamonds, 5000, 8000), host.LimitBlocks,
			"function 2 has 16000 blocks"},
		{"locals in blocks", host.DefaultModuleLimits, wasmgen.Branchy(wasmgen.Diamonds, 5000, 1000), host.LimitBlockJoins,
			"function 2 has 10004000 block joins (blocks times locals); the limit is 110000"},
		{"br_table targets", host.DefaultModuleLimits, wasmgen.Branchy(wasmgen.BrTable, 2, 8000), host.LimitBlocks,
			"function 2 has 16000 blocks"},
		{"locals at br_if", host.DefaultModuleLimits, wasmgen.Branchy(wasmgen.BrIfs, 20, 8000), host.LimitBlockJoins,
			"function 2 has 176022 block joins"},
		{"locals of a function", host.DefaultModuleLimits, wasmgen.Bomb(6000, 1), host.LimitFunctionLocals, "function 2 has 6000 locals per function; the limit is 5000"},
		{"functions", host.ModuleLimits{Functions: 2}, wasmgen.Bomb(1, 1), host.LimitFunctions, "the module has 3 functions; the limit is 2"},
		{"locals", host.ModuleLimits{Locals: 100}, wasmgen.Bombs(3, 40, 1).Encode(), host.LimitLocals, "the module has 120 locals; the limit is 100"},
		{"function bytes", host.ModuleLimits{FunctionBytes: 1000}, wasmgen.Bomb(300, 1), host.LimitFunctionBytes, "function 2 has 2"},
		{"code bytes", host.ModuleLimits{CodeBytes: 1000}, wasmgen.Bomb(300, 1), host.LimitCodeBytes, "code section bytes; the limit is 1000"},
		// The module: the ABI check used to come after compiling.
		{"no ABI exports", host.DefaultModuleLimits, noExports.Encode(), "", "export pawl_alloc is missing; export pawl_validate is missing; export memory is missing"},
		{"forbidden import", host.DefaultModuleLimits, forbidden.Encode(), "", "import env.escape is not allowed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRuntime(t, host.WithModuleLimits(c.limits))
			began := time.Now()
			_, err := r.Load(context.Background(), host.Digest(c.wasm), c.wasm)
			took := time.Since(began)
			var limit *host.LimitError
			switch {
			case c.limit == "" && !errors.Is(err, host.ErrABI):
				t.Fatalf("Load = %v; want an ABI error", err)
			case c.limit != "" && (!errors.As(err, &limit) || limit.Limit != c.limit || !errors.Is(err, host.ErrLimit)):
				t.Fatalf("Load = %v; want the %s limit", err, c.limit)
			case !strings.Contains(err.Error(), c.msg):
				t.Fatalf("Load = %v; want it to say %q", err, c.msg)
			case took > scanBound:
				t.Fatalf("refusing took %s", took)
			}
			if n := r.Stats().Compiles; n != 0 {
				t.Fatalf("%d compilations started for a refused module", n)
			}
		})
	}
}

// TestWorstModulesUnderTheLimitsCompileInBound loads the costliest
// functions DefaultModuleLimits allow, each alone: their compile time is
// what a caller who goes waits for at most before pawld is idle, and what
// a compilation may overrun its timeout by. docs/LIMITS.md has their
// figures. Under the race detector, which makes the costliest take
// minutes to compile, those are only checked to pass the limits.
func TestWorstModulesUnderTheLimitsCompileInBound(t *testing.T) {
	lim := host.DefaultModuleLimits
	const locals = 8 // with the function's 2 parameters, 10,500 blocks make 105,000 joins
	for _, c := range []struct {
		name  string
		wasm  []byte
		heavy bool // a second or more to compile without -race, minutes with it
	}{
		{"the most locals, with as many loops as they allow", wasmgen.Bomb(4998, 2), false},
		{"the deepest nesting of loops, with as many locals as it allows", wasmgen.Bomb(310, 32), false},
		{"998 locals in 10 nested loops", wasmgen.Bomb(998, 10), false},
		{"nested ifs", wasmgen.Branchy(wasmgen.NestedIfs, locals, lim.Blocks), true},
		{"br_if", wasmgen.Branchy(wasmgen.BrIfs, locals, lim.Blocks-1), true},
		{"diamonds", wasmgen.Branchy(wasmgen.Diamonds, locals, lim.Blocks/2), true},
		{"br_table", wasmgen.Branchy(wasmgen.BrTable, locals, lim.Blocks/2), false},
		{"the most locals, with as many blocks as they allow", wasmgen.Branchy(wasmgen.NestedIfs, 4998, lim.BlockJoins/5000), false},
	} {
		m, err := wasmcheck.Scan(c.wasm, lim)
		if err != nil {
			t.Fatalf("%s: Scan: %v", c.name, err)
		}
		if m.MaxBlocks*10 < lim.Blocks*9 && m.MaxBlockJoins*10 < lim.BlockJoins*9 && m.MaxLoopJoins*10 < lim.LoopJoins*9 {
			t.Fatalf("%s: %+v is not near a limit", c.name, m)
		}
		if c.heavy && raceEnabled {
			t.Logf("%s: within the limits (not compiled under -race)", c.name)
			continue
		}
		r := uncachedRuntime(t)
		began := time.Now()
		v, err := r.Load(context.Background(), host.Digest(c.wasm), c.wasm)
		took := time.Since(began)
		if err != nil {
			t.Fatalf("Load(%s): %v", c.name, err)
		}
		_ = v.Close(context.Background())
		// Seconds on a 2-core machine without -race (docs/LIMITS.md).
		t.Logf("%s: loaded in %s", c.name, took)
	}
}

// uncachedRuntime is a runtime without a compilation cache, for tests that
// must see modules compile.
func uncachedRuntime(t *testing.T, opts ...host.Option) *host.Runtime {
	t.Helper()
	r, err := host.New(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	return r
}

// TestCompilationIsSharedAndStopsWhenNoCallerWaits loads a module under
// the limits that takes long to compile (1,000 of the costliest functions: a minute of CPU without -race)
// from two callers: one compilation serves both, it goes on when the first
// goes, and stops soon after the second does.
func TestCompilationIsSharedAndStopsWhenNoCallerWaits(t *testing.T) {
	r := uncachedRuntime(t)
	wasm := wasmgen.Bombs(1000, 310, 32).Encode()
	digest := host.Digest(wasm)
	type result struct {
		err  error
		took time.Duration
	}
	load := func(ctx context.Context) chan result {
		done := make(chan result, 1)
		go func() {
			v, err := r.Load(ctx, digest, wasm)
			if v != nil {
				_ = v.Close(context.Background())
			}
			done <- result{err: err}
		}()
		return done
	}
	ctxA, cancelA := context.WithCancel(context.Background())
	ctxB, cancelB := context.WithCancel(context.Background())
	defer cancelB()
	a := load(ctxA)
	wasmbuild.AwaitStats(t, r.Stats, "compiling for one caller", func(s host.Stats) bool { return s.CompileWaiters == 1 })
	b := load(ctxB)
	wasmbuild.AwaitStats(t, r.Stats, "compiling for two callers", func(s host.Stats) bool { return s.CompileWaiters == 2 })
	cancelA()
	if res := <-a; !errors.Is(res.err, context.Canceled) {
		t.Fatalf("the first Load after its cancel = %v", res.err)
	}
	if s := r.Stats(); s.Compiles != 1 || s.Compiling != 1 || s.CompileWaiters != 1 {
		t.Fatalf("after the first caller went: %+v; want one compilation, still running for the second", s)
	}
	cancelB()
	if res := <-b; !errors.Is(res.err, context.Canceled) {
		t.Fatalf("the second Load after its cancel = %v", res.err)
	}
	idle := wasmbuild.AwaitStats(t, r.Stats, "idle", func(s host.Stats) bool { return s.Compiling == 0 })
	// Within one function's compile time, under a second without -race.
	t.Logf("compilation stopped %s after the last caller went", idle)
	if idle > 20*time.Second {
		t.Fatalf("the compilation ran on %s after the last caller went", idle)
	}
	if n := r.Stats().Compiles; n != 1 {
		t.Fatalf("%d compilations for two callers of one module", n)
	}
}

// TestCompileTimeout stops a compilation that runs past the limit.
func TestCompileTimeout(t *testing.T) {
	r := uncachedRuntime(t, host.WithCompileTimeout(300*time.Millisecond))
	wasm := wasmgen.Bombs(1000, 310, 32).Encode()
	_, err := r.Load(context.Background(), host.Digest(wasm), wasm)
	var limit *host.LimitError
	if !errors.As(err, &limit) || limit.Limit != host.LimitCompileTime || !strings.Contains(err.Error(), "longer than the 300ms limit") {
		t.Fatalf("Load = %v; want the compile time limit", err)
	}
	wasmbuild.AwaitStats(t, r.Stats, "idle", func(s host.Stats) bool { return s.Compiling == 0 })
}

// TestMemoryBudgetIsSharedByAllModules runs 50 hostile validations at once,
// of two modules whose pools could hold 25 instances each, against a budget
// of 4 instances: each is stopped at its own limit or refused for the
// budget, and never more than 4 instances exist.
func TestMemoryBudgetIsSharedByAllModules(t *testing.T) {
	const limit, instances = 32 << 20, 4
	r := newRuntime(t, host.WithMemoryLimit(limit), host.WithMemoryBudget(instances*limit),
		host.WithPoolSize(25), host.WithTimeout(2*time.Second))
	membomb, loop := load(t, r, "hostile/membomb"), load(t, r, "hostile/loop")
	var wg sync.WaitGroup
	errs := make([]error, 50)
	for i := range errs {
		v := membomb
		if i%2 == 1 {
			v = loop
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = v.Validate(context.Background(), host.Input{})
		}()
	}
	wg.Wait()
	counts := map[string]int{}
	for i, err := range errs {
		var lim *host.LimitError
		switch {
		case errors.Is(err, host.ErrMemoryLimit) && i%2 == 0:
			counts["memory limit"]++
		case errors.Is(err, host.ErrTimeout): // membomb too, when the loops leave it no CPU
			counts["time limit"]++
		case errors.As(err, &lim) && lim.Limit == host.LimitMemoryBudget && strings.Contains(err.Error(), "memory budget of 128 MiB"):
			counts["memory budget"]++
		default:
			t.Errorf("validation %d = %v", i, err)
		}
	}
	s := r.Stats()
	t.Logf("outcomes %v, %+v", counts, s)
	if s.PeakInstances > instances || s.MaxInstances != instances {
		t.Fatalf("%d instances existed at once; the budget allows %d", s.PeakInstances, instances)
	}
	if ran := counts["memory limit"] + counts["time limit"]; ran < instances {
		t.Fatalf("outcomes %v: at least the first %d validations should have run", counts, instances)
	}
}
