package abitest_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pawlcfg/pawl/internal/testkit/wasmbuild"
	"github.com/pawlcfg/pawl/validators/abitest"
	"github.com/pawlcfg/pawl/validators/host"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		wasmbuild.Cleanup()
		os.Exit(code)
	}))
}

// run runs the kit on the example Go module name with opts, with the
// tests' shared compilation cache.
func run(t *testing.T, name string, opts ...abitest.Option) *abitest.Report {
	t.Helper()
	return runModule(t, wasmbuild.Build(t, name), opts...)
}

func runModule(t *testing.T, wasm []byte, opts ...abitest.Option) *abitest.Report {
	t.Helper()
	opts = append([]abitest.Option{abitest.WithCacheDir(wasmbuild.CacheDir(t)), abitest.WithCompileTimeout(wasmbuild.CompileTimeout)}, opts...)
	rep, err := abitest.Run(context.Background(), wasm, opts...)
	if err != nil {
		t.Fatalf("abitest.Run: %v", err)
	}
	return rep
}

// loadedTimeout is the time limit of a call in the tests of well-behaved
// modules: on a loaded 2-core machine a fresh Go instance, or one that
// compiles a JSON Schema from its parameters, can take more than the
// default second. The hostile modules keep the default, which is what
// their test shows the kit enforces.
const loadedTimeout = 10 * time.Second

// examples are the example modules in every language, each with how it
// is built and the directory of its cases (the routing ports share the Go
// example's: the same verdicts).
var examples = []struct {
	name, cases string
	build       func(testing.TB, string) []byte
}{
	{"routing", "routing", wasmbuild.Build},
	{"jsonschema", "jsonschema", wasmbuild.Build},
	{"routing-rust", "routing", wasmbuild.BuildRust},
	{"routing-as", "routing", wasmbuild.BuildAssemblyScript},
}

func cases(t *testing.T, example string) abitest.Option {
	t.Helper()
	cs, err := abitest.LoadCases(filepath.Join(wasmbuild.Examples(), example, "cases"))
	if err != nil {
		t.Fatal(err)
	}
	return abitest.WithCases(cs...)
}

func describe(rep *abitest.Report) string {
	var b strings.Builder
	for _, c := range rep.Checks {
		b.WriteString("\n\t" + string(c.Status) + "\t" + c.Name + "\t" + c.Detail)
	}
	return b.String()
}

// TestTheExamplesPass runs the kit on the example modules of every
// language, with their cases: every check passes.
func TestTheExamplesPass(t *testing.T) {
	for _, ex := range examples {
		t.Run(ex.name, func(t *testing.T) {
			rep := runModule(t, ex.build(t, ex.name), cases(t, ex.cases), abitest.WithTimeout(loadedTimeout))
			if !rep.OK() {
				t.Fatalf("the kit fails %s:%s", ex.name, describe(rep))
			}
			passed, _, skipped := rep.Counts()
			if skipped != 0 || passed < 20 {
				t.Fatalf("%d checks passed, %d skipped; want every check run:%s", passed, skipped, describe(rep))
			}
			for _, want := range []string{abitest.CheckReuse, abitest.CheckIsolation, abitest.CheckAfterFailure, abitest.CheckMemory} {
				if c, _ := rep.Find(want); c.Status != abitest.Pass {
					t.Errorf("check %q: %+v", want, c)
				}
			}
		})
	}
}

// membombLimit is the memory limit of hostile/membomb's test.
const membombLimit = 24 << 20

// TestHostileModulesFailWithTheirReason runs the kit on every hostile
// module: each fails, at the check that names its misbehaviour.
func TestHostileModulesFailWithTheirReason(t *testing.T) {
	tests := []struct {
		module, check, detail string
	}{
		{"hostile/noabi", abitest.CheckExports, "export pawl_validate is missing"},
		{"hostile/forbidden", abitest.CheckImports, "import env.pawl_escape is not allowed"},
		{"hostile/abiv2", abitest.CheckVersion, "pawl_abi_version returned 2"},
		{"hostile/loop", abitest.CheckTime, "ran longer than the 1s limit"},
		{"hostile/membomb", abitest.CheckMemory, "exceeded the memory limit of 24 MiB"},
		{"hostile/trap", abitest.InputPrefix + "empty", "trap: validator gave up on purpose"},
		{"hostile/bigoutput", abitest.CheckOutput, "output too large"},
		{"hostile/stateful", abitest.CheckIsolation, "not the first config this instance saw"},
		{"hostile/stateful", abitest.CheckAfterFailure, "input large: before {\"valid\":true"},
	}
	for _, tt := range tests {
		t.Run(strings.TrimPrefix(tt.module, "hostile/")+"/"+tt.check, func(t *testing.T) {
			// Only the loop is about time: the others get a time limit a
			// loaded machine does not reach before their own limit.
			opts := []abitest.Option{abitest.WithTimeout(loadedTimeout)}
			switch tt.module {
			case "hostile/loop":
				opts = []abitest.Option{abitest.WithTimeout(host.DefaultTimeout)}
			case "hostile/membomb":
				// A smaller limit, reached sooner on a loaded machine.
				opts = append(opts, abitest.WithMemoryLimit(membombLimit))
			}
			rep := run(t, tt.module, opts...)
			if rep.OK() {
				t.Fatalf("the kit passes %s:%s", tt.module, describe(rep))
			}
			c, ok := rep.Find(tt.check)
			if !ok || c.Status != abitest.Fail || !strings.Contains(c.Detail, tt.detail) {
				t.Fatalf("check %q = %+v; want it failed with %q:%s", tt.check, c, tt.detail, describe(rep))
			}
		})
	}
}
