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

// TestWorstModulesUnderTheLimitsCompileInBound compiles the costliest
// functions DefaultModuleLimits allow, each alone: their compile time is
// what a caller who goes waits for at most before pawld is idle.
func TestWorstModulesUnderTheLimitsCompileInBound(t *testing.T) {
	for _, shape := range []struct{ locals, loops int }{
		{4998, 2}, // the most locals, with as many loops as they allow
		{310, 32}, // the deepest nesting, with as many locals as it allows
		{998, 10},
	} {
		r := uncachedRuntime(t)
		wasm := wasmgen.Bomb(shape.locals, shape.loops)
		began := time.Now()
		v, err := r.Load(context.Background(), host.Digest(wasm), wasm)
		took := time.Since(began)
		if err != nil {
			t.Fatalf("Load(%d locals, %d loops): %v", shape.locals, shape.loops, err)
		}
		_ = v.Close(context.Background())
		// 0.2-0.8s on an idle 2-core machine without -race.
		t.Logf("%d locals in %d nested loops: loaded in %s", shape.locals, shape.loops, took)
		if took > time.Minute {
			t.Fatalf("%d locals in %d nested loops took %s to load", shape.locals, shape.loops, took)
		}
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
