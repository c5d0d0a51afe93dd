// Package wasmbuild compiles the validators under validators/examples to
// WebAssembly for tests, with the Go toolchain running the tests, once per
// test process (the Go build cache makes repeat builds cheap).
package wasmbuild

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pawlcfg/pawl/validators/host"
)

var (
	mu    sync.Mutex
	built = map[string][]byte{}
	dir   string
)

// Examples is the directory of the example validators.
func Examples() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "validators", "examples")
}

// Build returns the module built from validators/examples/<name>, e.g.
// "routing" or "hostile/loop". Modules are built with -buildmode=c-shared
// (a WASI reactor) except "hostile/noabi", an ordinary WASI program.
func Build(tb testing.TB, name string) []byte {
	tb.Helper()
	wasm, err := build(name)
	if err != nil {
		tb.Fatal(err)
	}
	return wasm
}

func build(name string) ([]byte, error) {
	mu.Lock()
	defer mu.Unlock()
	if b, ok := built[name]; ok {
		return b, nil
	}
	if dir == "" {
		d, err := os.MkdirTemp("", "pawl-wasm")
		if err != nil {
			return nil, err
		}
		dir = d
	}
	out := filepath.Join(dir, strings.ReplaceAll(name, "/", "_")+".wasm")
	args := []string{"build", "-trimpath", "-o", out}
	if name != "hostile/noabi" {
		args = append(args, "-buildmode=c-shared")
	}
	args = append(args, "./"+name)
	cmd := exec.Command(goTool(), args...)
	cmd.Dir = Examples()
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("wasmbuild: build %s: %v\n%s", name, err, msg)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return nil, err
	}
	built[name] = b
	return b, nil
}

func goTool() string {
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p
	}
	return "go"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// Cleanup removes the built modules; call it at the end of TestMain.
func Cleanup() {
	mu.Lock()
	defer mu.Unlock()
	if dir != "" {
		_ = os.RemoveAll(dir)
		dir = ""
		built = map[string][]byte{}
	}
}

// CacheDir is a wazero compilation cache directory shared by every test
// process of the user on the machine, kept between runs: wazero keys
// entries by module hash and wazero version and writes them atomically, so
// sharing is safe, and each module is compiled once per machine rather
// than once per test. It is the user's own (named by uid, mode 0700): the
// runtime refuses a cache directory others could write.
func CacheDir(tb testing.TB) string {
	tb.Helper()
	d := filepath.Join(os.TempDir(), fmt.Sprintf("pawl-test-wasm-cache-%d", os.Getuid()))
	if err := os.MkdirAll(d, 0o700); err != nil {
		tb.Fatal(err)
	}
	return d
}

// CompileTimeout is the compile timeout for tests that load the example
// validators: under -race on a loaded 2-core machine, a cold compilation
// of a 6 MB Go module takes more than a minute. The limit itself has its
// own tests.
const CompileTimeout = 10 * time.Minute

// ValidatorTimeout is the validation limit for tests that need their
// validations to succeed: the limit is wall-clock time, and on two cores
// shared by every test package under -race the start of a Go module's
// runtime has taken longer than host.DefaultTimeout (a second), and a
// 400 kB document's validation too. The tests of the limit set their own.
const ValidatorTimeout = 30 * time.Second

// Load builds the example validator name and loads it into a new runtime
// that uses CacheDir and ValidatorTimeout; the test's cleanup closes both. Its Info().Digest is
// the module's digest.
func Load(tb testing.TB, name string) *host.Validator {
	tb.Helper()
	ctx := context.Background()
	rt, err := host.New(ctx, host.WithCacheDir(CacheDir(tb)), host.WithCompileTimeout(CompileTimeout), host.WithTimeout(ValidatorTimeout))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = rt.Close(ctx) })
	wasm := Build(tb, name)
	v, err := rt.Load(ctx, host.Digest(wasm), wasm)
	if err != nil {
		tb.Fatalf("wasmbuild: load %s: %v", name, err)
	}
	tb.Cleanup(func() { _ = v.Close(ctx) })
	return v
}

// AwaitStats polls a validator runtime's counters (stats, e.g.
// Runtime.Stats or Server.ValidatorStats) until ok holds, failing the test
// after a minute, and returns how long it took: the counters are the event
// a test of compilations and instances waits for.
func AwaitStats(tb testing.TB, stats func() host.Stats, what string, ok func(host.Stats) bool) time.Duration {
	tb.Helper()
	began := time.Now()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(time.Minute)
	for !ok(stats()) {
		select {
		case <-tick.C:
		case <-deadline:
			tb.Fatalf("after a minute, still not %s: %+v", what, stats())
		}
	}
	return time.Since(began)
}
