package host_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pawlcfg/pawl/internal/testkit/wasmbuild"
	"github.com/pawlcfg/pawl/internal/testkit/wasmgen"
	"github.com/pawlcfg/pawl/validators/host"
)

// compileChildEnv, set in the environment, makes the test binary the
// compile process (TestMain).
const compileChildEnv = "PAWL_HOST_TEST_COMPILE_CHILD=1"

// compileProcess is the option that compiles in the test binary itself.
func compileProcess(t *testing.T) host.Option {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return host.WithCompileProcess([]string{exe}, compileChildEnv)
}

// slowModule is the costliest function the default limits allow: seconds
// of CPU to compile without -race, minutes with it.
func slowModule() []byte {
	return wasmgen.Branchy(wasmgen.NestedIfs, 8, host.DefaultModuleLimits.Blocks)
}

// smallModule compiles in milliseconds; tag makes it a module of its own.
func smallModule(tag string) []byte {
	return wasmgen.WithCustom(wasmgen.Bomb(2, 2), tag)
}

// awaitChild waits for r's one compile process to run and returns its pid.
func awaitChild(t *testing.T, r *host.Runtime) int {
	t.Helper()
	wasmbuild.AwaitStats(t, r.Stats, "compiling in a child", func(s host.Stats) bool { return len(s.CompileProcesses) == 1 })
	return r.Stats().CompileProcesses[0]
}

// assertGone fails unless the process pid no longer exists, reaped.
func assertGone(t *testing.T, r *host.Runtime, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("compile process %d: kill(pid, 0) = %v; want it gone (ESRCH)", pid, err)
	}
	if pids := r.Stats().CompileProcesses; len(pids) != 0 {
		t.Fatalf("compile processes %v listed", pids)
	}
}

// assertHealthy loads a small module through the child after a stopped
// compilation.
func assertHealthy(t *testing.T, r *host.Runtime, tag string) {
	t.Helper()
	wasm := smallModule(tag)
	v, err := r.Load(context.Background(), host.Digest(wasm), wasm)
	if err != nil {
		t.Fatalf("Load of a small module after the stop: %v", err)
	}
	_ = v.Close(context.Background())
}

// stopBound is how long after its timeout or cancel a compilation in a
// child may go on: killing and reaping a process, on a loaded machine.
const stopBound = 3 * time.Second

// TestCompileProcessStopsAtTheTimeout compiles the costliest module the
// limits allow in a child under a 2s timeout: the child is killed at the
// timeout, not at the end of the function, and the runtime goes on.
func TestCompileProcessStopsAtTheTimeout(t *testing.T) {
	const timeout = 2 * time.Second
	r := uncachedRuntime(t, compileProcess(t), host.WithCompileTimeout(timeout))
	wasm := slowModule()
	began := time.Now()
	var pid int
	done := make(chan error, 1)
	go func() {
		_, err := r.Load(context.Background(), host.Digest(wasm), wasm)
		done <- err
	}()
	pid = awaitChild(t, r)
	err := <-done
	took := time.Since(began)
	var limit *host.LimitError
	if !errors.As(err, &limit) || limit.Limit != host.LimitCompileTime {
		t.Fatalf("Load = %v; want the compile time limit", err)
	}
	t.Logf("stopped %s after the %s timeout", took-timeout, timeout)
	if took > timeout+stopBound {
		t.Fatalf("Load took %s with a %s timeout", took, timeout)
	}
	assertGone(t, r, pid)
	assertHealthy(t, r, "after the timeout")
}

// TestCompileProcessStopsWhenTheCallerGoes cancels the only Load of a
// module compiling in a child: the child is killed at once.
func TestCompileProcessStopsWhenTheCallerGoes(t *testing.T) {
	r := uncachedRuntime(t, compileProcess(t))
	wasm := slowModule()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := r.Load(ctx, host.Digest(wasm), wasm)
		done <- err
	}()
	pid := awaitChild(t, r)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Load after its cancel = %v", err)
	}
	idle := wasmbuild.AwaitStats(t, r.Stats, "idle", func(s host.Stats) bool { return s.Compiling == 0 })
	t.Logf("compile process stopped %s after the caller went", idle)
	if idle > stopBound {
		t.Fatalf("the compilation ran on %s after the caller went", idle)
	}
	assertGone(t, r, pid)
	assertHealthy(t, r, "after the cancel")
}

// TestCompileProcessStopsOnClose closes a runtime compiling in a child:
// Close returns at once, and the child is gone.
func TestCompileProcessStopsOnClose(t *testing.T) {
	r, err := host.New(context.Background(), compileProcess(t))
	if err != nil {
		t.Fatal(err)
	}
	wasm := slowModule()
	done := make(chan error, 1)
	go func() {
		_, err := r.Load(context.Background(), host.Digest(wasm), wasm)
		done <- err
	}()
	pid := awaitChild(t, r)
	began := time.Now()
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took > stopBound {
		t.Fatalf("Close took %s", took)
	}
	if err := <-done; !errors.Is(err, host.ErrClosed) {
		t.Fatalf("Load after Close = %v", err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("compile process %d after Close: kill(pid, 0) = %v", pid, err)
	}
}

// TestCompileProcessCompilesAndValidates loads the routing example and a
// small module through the child, and a module that does not compile.
func TestCompileProcessCompilesAndValidates(t *testing.T) {
	r := newRuntime(t, compileProcess(t))
	v := load(t, r, "routing")
	res, err := v.Validate(context.Background(), host.Input{Config: []byte(`{"upstreams":[{"host":"a:443","weight":100}]}`)})
	if err != nil || !res.Valid {
		t.Fatalf("Validate = %+v, %v", res, err)
	}
	// An i32.add with nothing on the stack: its shape passes the checks.
	bad := wasmgen.ABI(0, []byte{0x6a}).Encode()
	_, err = r.Load(context.Background(), host.Digest(bad), bad)
	if !errors.Is(err, host.ErrNotWasm) {
		t.Fatalf("Load of a module that does not compile = %v; want ErrNotWasm", err)
	}
	t.Logf("compile error: %v", err)
	if n := r.Stats().Compiles; n != 2 {
		t.Fatalf("%d compilations", n)
	}
}

// TestCompileProcessFillsTheRuntimesCache loads modules through the child
// into an empty cache: each is one cache entry, so the runtime found what
// the child compiled (a different key, from a different wazero config,
// would make the runtime compile it again, in process, and add a second).
func TestCompileProcessFillsTheRuntimesCache(t *testing.T) {
	dir := t.TempDir()
	r := uncachedRuntime(t, compileProcess(t), host.WithCacheDir(dir))
	for _, tag := range []string{"a", "b"} {
		wasm := smallModule(tag)
		v, err := r.Load(context.Background(), host.Digest(wasm), wasm)
		if err != nil {
			t.Fatal(err)
		}
		_ = v.Close(context.Background())
	}
	var entries []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			entries = append(entries, path)
		}
		return err
	})
	if err != nil || len(entries) != 2 {
		t.Fatalf("cache entries %v, %v; want 2, one per module", entries, err)
	}
}

// TestCompileProcessLimitsItself runs the compile process alone on the
// slow module: over its memory limit it exits with its own code, and past
// its CPU limit the kernel kills it.
func TestCompileProcessLimitsItself(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	run := func(cpu, memory string) (*os.ProcessState, string) {
		var stderr strings.Builder
		cmd := exec.Command(exe, "-cache", t.TempDir(), "-cpu", cpu, "-memory", memory, "-memory-limit", "65536")
		cmd.Env = []string{compileChildEnv}
		cmd.Stdin = bytes.NewReader(slowModule())
		cmd.Stderr = &stderr
		_ = cmd.Run()
		return cmd.ProcessState, stderr.String()
	}
	if st, stderr := run("600", "1"); st.ExitCode() != 4 || !strings.Contains(stderr, "over the 0 MiB limit") {
		t.Fatalf("with a 1-byte memory limit: %v, %q; want exit status 4", st, stderr)
	}
	st, stderr := run("1", strconv.Itoa(host.DefaultCompileMemory))
	if ws := st.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("with a 1s CPU limit: %v, %q; want killed", st, stderr)
	}
	t.Logf("killed after %s of CPU", st.UserTime()+st.SystemTime())
}

// TestCompileProcessPrivateCache: without a cache directory, the runtime
// makes a private one (0700) for its compile process, and Close removes it.
func TestCompileProcessPrivateCache(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	r, err := host.New(context.Background(), compileProcess(t))
	if err != nil {
		t.Fatal(err)
	}
	wasm := smallModule("private")
	v, err := r.Load(context.Background(), host.Digest(wasm), wasm)
	if err != nil {
		t.Fatal(err)
	}
	_ = v.Close(context.Background())
	dirs, _ := filepath.Glob(filepath.Join(tmp, "pawl-wasm-cache-*"))
	if len(dirs) != 1 {
		t.Fatalf("cache directories %v; want one", dirs)
	}
	if fi, err := os.Stat(dirs[0]); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("cache directory: %v, %v; want mode 0700", fi.Mode(), err)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dirs[0]); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("cache directory after Close: %v; want it removed", err)
	}
}
