package host_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pawlcfg/pawl/internal/testkit/wasmbuild"
	"github.com/pawlcfg/pawl/validators/host"
)

func TestMain(m *testing.M) {
	if os.Getenv(strings.Split(compileChildEnv, "=")[0]) != "" {
		os.Exit(host.RunCompileProcess(os.Args[1:], os.Stdin, os.Stderr))
	}
	code := m.Run()
	wasmbuild.Cleanup()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func newRuntime(t testing.TB, opts ...host.Option) *host.Runtime {
	t.Helper()
	// A generous validation limit (opts may set another): the tests that
	// need a validation, or a Load, to succeed are not tests of the limit.
	r, err := host.New(context.Background(), append([]host.Option{host.WithCacheDir(wasmbuild.CacheDir(t)),
		host.WithCompileTimeout(wasmbuild.CompileTimeout), host.WithTimeout(wasmbuild.ValidatorTimeout)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	return r
}

func load(t testing.TB, r *host.Runtime, name string) *host.Validator {
	t.Helper()
	wasm := wasmbuild.Build(t, name)
	v, err := r.Load(context.Background(), host.Digest(wasm), wasm)
	if err != nil {
		t.Fatalf("Load(%s): %v", name, err)
	}
	t.Cleanup(func() { _ = v.Close(context.Background()) })
	return v
}

func violations(res host.Result) string {
	var parts []string
	for _, v := range res.Violations {
		parts = append(parts, v.Path+": "+v.Message)
	}
	return strings.Join(parts, "\n")
}

func TestRoutingValidator(t *testing.T) {
	v := load(t, newRuntime(t), "routing")
	if info := v.Info(); info.ABIVersion != 1 || !strings.HasPrefix(info.Digest, "sha256:") {
		t.Fatalf("Info = %+v", info)
	}
	ctx := context.Background()
	res, err := v.Validate(ctx, host.Input{Config: []byte(`{"upstreams":[{"host":"a:443","weight":60},{"host":"b:443","weight":40}]}`)})
	if err != nil || !res.Valid || len(res.Violations) != 0 {
		t.Fatalf("valid table: %+v, %v", res, err)
	}
	res, err = v.Validate(ctx, host.Input{Config: []byte(`{"upstreams":[{"host":"a:443","weight":60},{"host":"a:443","weight":30}]}`)})
	if err != nil || res.Valid {
		t.Fatalf("invalid table: %+v, %v", res, err)
	}
	want := "/upstreams/1/host: host \"a:443\" is also upstream 0; hosts must be unique\n/upstreams: weights sum to 90; they must sum to 100"
	if got := violations(res); got != want {
		t.Fatalf("violations:\n%s\nwant:\n%s", got, want)
	}
}

func TestJSONSchemaValidator(t *testing.T) {
	// The module's start (the Go runtime, the embedded schema's
	// compilation) took over the default second under -race on loaded
	// cores; the time limit has its own tests.
	v := load(t, newRuntime(t, host.WithTimeout(30*time.Second)), "jsonschema")
	ctx := context.Background()
	res, err := v.Validate(ctx, host.Input{Config: []byte(`{"currency":"EUR","max_amount":500,"countries":["DE","FR"]}`), MediaType: "application/json"})
	if err != nil || !res.Valid {
		t.Fatalf("valid config against the embedded schema: %+v, %v", res, err)
	}
	res, err = v.Validate(ctx, host.Input{Config: []byte(`{"currency":"YEN","max_amount":0,"countries":["de"]}`)})
	if err != nil || res.Valid {
		t.Fatalf("invalid config: %+v, %v", res, err)
	}
	got := violations(res)
	for _, want := range []string{"/currency: value must be one of", "/max_amount: minimum: got 0, want 1", "/countries/0: "} {
		if !strings.Contains(got, want) {
			t.Errorf("violations do not include %q:\n%s", want, got)
		}
	}
	// A document the fast path cannot decide (a duplicate name, of which
	// the last wins) goes to the full validator.
	res, err = v.Validate(ctx, host.Input{Config: []byte(`{"currency":"EUR","max_amount":500,"countries":["DE"],"currency":"YEN"}`)})
	if err != nil || res.Valid || !strings.Contains(violations(res), "/currency: value must be one of") {
		t.Fatalf("a duplicate name: %+v, %v", res, err)
	}
	// A schema in the parameters replaces the embedded one.
	params := []byte(`{"schema":{"type":"object","required":["name"]}}`)
	res, err = v.Validate(ctx, host.Input{Config: []byte(`{}`), Params: params})
	if err != nil || res.Valid || !strings.Contains(violations(res), "missing property 'name'") {
		t.Fatalf("params schema: %+v, %v", res, err)
	}
	res, err = v.Validate(ctx, host.Input{Config: []byte(`not json`)})
	if err != nil || res.Valid || !strings.Contains(violations(res), "the config is not JSON") {
		t.Fatalf("not JSON: %+v, %v", res, err)
	}
}

func TestLoadRefusals(t *testing.T) {
	r := newRuntime(t)
	ctx := context.Background()
	routing := wasmbuild.Build(t, "routing")
	cases := []struct {
		name   string
		digest string
		wasm   []byte
		is     error
		msg    string
	}{
		{"digest mismatch", host.Digest([]byte("other")), routing, host.ErrDigestMismatch, "the bytes hash to " + host.Digest(routing)},
		{"not wasm", host.Digest([]byte("{}")), []byte("{}"), host.ErrNotWasm, "not a WebAssembly module"},
		{"truncated", host.Digest(routing[:len(routing)/2]), routing[:len(routing)/2], host.ErrNotWasm, ""},
	}
	for _, name := range []string{"hostile/forbidden", "hostile/abiv2", "hostile/noabi"} {
		wasm := wasmbuild.Build(t, name)
		cases = append(cases, struct {
			name   string
			digest string
			wasm   []byte
			is     error
			msg    string
		}{name, host.Digest(wasm), wasm, host.ErrABI, map[string]string{
			"hostile/forbidden": "import env.pawl_escape is not allowed",
			"hostile/abiv2":     "pawl_abi_version returned 2; this host runs ABI 1",
			"hostile/noabi":     "export pawl_abi_version is missing; export pawl_alloc is missing; export pawl_validate is missing",
		}[name]})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := r.Load(ctx, c.digest, c.wasm)
			if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("Load = %v; want %v saying %q", err, c.is, c.msg)
			}
		})
	}
}

// TestCheckIsLoadsFirstStep: Check refuses what Load refuses before
// compiling, with the imports' and the exports' problems apart, and
// compiles nothing; the ABI version is known only once a module runs.
func TestCheckIsLoadsFirstStep(t *testing.T) {
	r := newRuntime(t)
	for _, c := range []struct {
		name             string
		imports, exports int
	}{{"hostile/forbidden", 1, 0}, {"hostile/noabi", 0, 3}, {"hostile/abiv2", 0, 0}, {"routing", 0, 0}} {
		err := r.Check(wasmbuild.Build(t, c.name))
		var abiErr *host.ABIError
		switch {
		case c.imports+c.exports == 0 && err != nil:
			t.Errorf("Check(%s) = %v", c.name, err)
		case c.imports+c.exports > 0 && (!errors.As(err, &abiErr) || len(abiErr.Imports) != c.imports || len(abiErr.Exports) != c.exports ||
			len(abiErr.Problems) != c.imports+c.exports || abiErr.Version != ""):
			t.Errorf("Check(%s) = %#v; want %d import and %d export problems", c.name, err, c.imports, c.exports)
		}
	}
	if _, err := r.Load(context.Background(), host.Digest(wasmbuild.Build(t, "hostile/abiv2")), wasmbuild.Build(t, "hostile/abiv2")); err == nil {
		t.Fatal("Load of hostile/abiv2 succeeded")
	} else if abiErr := (*host.ABIError)(nil); !errors.As(err, &abiErr) || abiErr.Version != "pawl_abi_version returned 2; this host runs ABI 1" {
		t.Errorf("Load of hostile/abiv2 = %#v; want its Version", err)
	}
	if n := r.Stats().Compiles; n != 1 {
		t.Errorf("%d compilations; want the one of Load", n)
	}
}

func TestHostileModulesAreContained(t *testing.T) {
	// The limit on time is generous here so that the memory and output
	// limits are what stop membomb and bigoutput; loop gets a shorter one
	// (it never returns, so it exceeds any limit), yet long enough for
	// its Load, whose start of the Go runtime and ABI version call run
	// under the same wall-clock limit: 300 ms was too short for those on
	// a loaded 2-core machine under -race.
	r := newRuntime(t, host.WithTimeout(10*time.Second), host.WithMemoryLimit(32<<20))
	ctx := context.Background()
	good := load(t, r, "routing")
	valid := host.Input{Config: []byte(`{"upstreams":[{"host":"a","weight":100}]}`)}

	t.Run("loop", func(t *testing.T) {
		v := load(t, newRuntime(t, host.WithTimeout(3*time.Second)), "hostile/loop")
		_, err := v.Validate(ctx, host.Input{})
		var timeout *host.TimeoutError
		if !errors.As(err, &timeout) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, host.ErrTimeout) {
			t.Fatalf("loop = %v, want a timeout", err)
		}
	})
	t.Run("membomb", func(t *testing.T) {
		v := load(t, r, "hostile/membomb")
		_, err := v.Validate(ctx, host.Input{})
		if !errors.Is(err, host.ErrMemoryLimit) || !strings.Contains(err.Error(), "32 MiB") {
			t.Fatalf("membomb = %v, want the memory limit", err)
		}
	})
	t.Run("trap", func(t *testing.T) {
		v := load(t, r, "hostile/trap")
		_, err := v.Validate(ctx, host.Input{Config: []byte("boom")})
		var trap *host.TrapError
		if !errors.As(err, &trap) || !strings.Contains(trap.Detail, "validator gave up on purpose") {
			t.Fatalf("trap = %v, want a trap with the panic message", err)
		}
		// The trapped instance was discarded; the next call gets a fresh one.
		res, err := v.Validate(ctx, host.Input{Config: []byte("ok")})
		if err != nil || !res.Valid {
			t.Fatalf("call after a trap: %+v, %v", res, err)
		}
	})
	t.Run("bigoutput", func(t *testing.T) {
		v := load(t, r, "hostile/bigoutput")
		_, err := v.Validate(ctx, host.Input{})
		if !errors.Is(err, host.ErrOutputTooLarge) || !strings.Contains(err.Error(), "the limit is 1048576") {
			t.Fatalf("bigoutput = %v, want the output limit", err)
		}
	})
	// None of that broke the runtime or the good validator.
	res, err := good.Validate(ctx, valid)
	if err != nil || !res.Valid {
		t.Fatalf("good validator after hostile ones: %+v, %v", res, err)
	}
}

// TestLoopDoesNotSlowOtherValidators runs a looping module and, while it
// spins, many validations of another: they all finish before the loop is
// stopped.
func TestLoopDoesNotSlowOtherValidators(t *testing.T) {
	r := newRuntime(t, host.WithTimeout(5*time.Second))
	loop := load(t, r, "hostile/loop")
	good := load(t, r, "routing")
	loopDone := make(chan error, 1)
	go func() {
		_, err := loop.Validate(context.Background(), host.Input{})
		loopDone <- err
	}()
	for range 50 {
		res, err := good.Validate(context.Background(), host.Input{Config: []byte(`{"upstreams":[{"host":"a","weight":100}]}`)})
		if err != nil || !res.Valid {
			t.Fatalf("validation beside a loop: %+v, %v", res, err)
		}
	}
	select {
	case err := <-loopDone:
		t.Fatalf("the loop ended before the other validations finished: %v", err)
	default:
	}
	if err := <-loopDone; !errors.Is(err, host.ErrTimeout) {
		t.Fatalf("loop = %v", err)
	}
}

func TestConcurrentValidations(t *testing.T) {
	v := load(t, newRuntime(t), "routing")
	goroutines, each := 32, 20
	if testing.Short() {
		goroutines = 8
	}
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				w := (g + i) % 101
				cfg := fmt.Sprintf(`{"upstreams":[{"host":"a","weight":%d},{"host":"b","weight":%d}]}`, w, 100-w)
				if g%2 == 1 {
					cfg = fmt.Sprintf(`{"upstreams":[{"host":"a","weight":%d}]}`, w)
				}
				res, err := v.Validate(context.Background(), host.Input{Config: []byte(cfg)})
				if err != nil {
					errs <- err
					return
				}
				if wantValid := g%2 == 0 || w == 100; res.Valid != wantValid {
					errs <- fmt.Errorf("%s: valid=%v, want %v (%s)", cfg, res.Valid, wantValid, violations(res))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestCompilationCacheIsReusedAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	wasm := wasmbuild.Build(t, "jsonschema")
	ctx := context.Background()
	start := func() time.Duration {
		// Loading runs the module's start (the Go runtime's), which the
		// default second bounds; under -race on a loaded machine it can take
		// longer, and the limit is tested elsewhere.
		r, err := host.New(ctx, host.WithCacheDir(dir), host.WithTimeout(30*time.Second), host.WithCompileTimeout(wasmbuild.CompileTimeout))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(ctx)
		began := time.Now()
		v, err := r.Load(ctx, host.Digest(wasm), wasm)
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(began)
		_ = v.Close(ctx)
		return took
	}
	cold := start()
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		t.Fatalf("the cache directory is empty after a load: %v", err)
	}
	warm := start()
	t.Logf("load with a cold cache %s, warm %s (benchmarks in docs/BENCHMARKS.md)", cold, warm)
}

func TestOptionsAreValidated(t *testing.T) {
	for _, opt := range []host.Option{host.WithMemoryLimit(1000), host.WithTimeout(0), host.WithMaxOutput(0), host.WithPoolSize(0)} {
		if _, err := host.New(context.Background(), opt); err == nil {
			t.Error("New accepted an invalid option")
		}
	}
}
