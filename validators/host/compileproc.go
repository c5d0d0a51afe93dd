package host

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental"
)

// The compile process (WithCompileProcess) is Linux-only in its guarantees:
// it relies on process groups, RLIMIT_CPU and /proc/self/statm.

// DefaultCompileMemory bounds the resident memory of a compile process
// (WithCompileProcess): the 6 MB Go example validator compiles in a
// process of 160 MB, the costliest function the module limits allow in
// under 100 MB.
const DefaultCompileMemory = 2 << 30

// Exit codes of the compile process, besides 0 (compiled) and death by a
// signal (killed by its parent, or by RLIMIT_CPU).
const (
	exitCompileError = 3 // the module does not compile; stderr says why
	exitMemory       = 4 // over its memory limit
	exitUsage        = 5 // bad arguments or cache directory
)

// maxChildStderr bounds what the parent keeps of a compile process's
// stderr.
const maxChildStderr = 16 << 10

// WithCompileProcess compiles each module in a child process, started as
// argv plus arguments of its own, with exactly env as its environment (nil:
// empty); the child must call RunCompileProcess with those arguments. The
// child compiles into the runtime's compilation cache (WithCacheDir, or a
// private directory removed on Close) and the runtime then loads the module
// from it. So the compile timeout, cancelling and Close stop a compilation
// at once, by killing the child's process group, rather than between
// functions; the child runs under RLIMIT_CPU of the compile timeout (times
// its two compiling threads) and DefaultCompileMemory of resident memory.
// Linux only.
//
// A server sets it to re-execute itself (pawld does); a program that cannot
// (the SDK, which only runs modules a server accepted) compiles in process.
func WithCompileProcess(argv []string, env ...string) Option {
	return func(o *options) {
		o.compileProcess = slices.Clone(argv)
		o.compileEnv = slices.Clone(env)
		if o.compileProcess == nil {
			o.compileProcess = []string{}
		}
	}
}

// compileInChild compiles wasm in a child process into the runtime's
// cache directory. It returns nil once the child compiled it; when ctx ends
// first it kills the child and returns ctx's error; a child that failed
// returns its reason.
func (r *Runtime) compileInChild(ctx context.Context, wasm []byte) error {
	cpu := r.opts.compileTime
	if d, ok := ctx.Deadline(); ok {
		cpu = time.Until(d)
	}
	// A backstop, should the parent be gone: the parent enforces the wall
	// clock. The child compiles on compileWorkers threads, which spend CPU
	// time that many times faster.
	secs := max(1, int64(math.Ceil(cpu.Seconds())))*compileWorkers + 1
	argv := r.opts.compileProcess
	cmd := exec.Command(argv[0], append(slices.Clone(argv[1:]),
		"-cache", r.cacheDir, "-cpu", strconv.FormatInt(secs, 10), "-memory", strconv.Itoa(DefaultCompileMemory),
		"-memory-limit", strconv.Itoa(r.opts.memoryLimit))...)
	cmd.Env = r.opts.compileEnv
	if cmd.Env == nil {
		cmd.Env = []string{}
	}
	cmd.Stdin = bytes.NewReader(wasm)
	stderr := &limitedBuffer{max: maxChildStderr}
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("validator: start the compile process %s: %w", argv[0], err)
	}
	pid := cmd.Process.Pid
	r.mu.Lock()
	r.children[pid] = struct{}{}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.children, pid)
		r.mu.Unlock()
	}()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var err error
	select {
	case err = <-waited:
	case <-ctx.Done():
		// The child and whatever it started: its group, of which it is the
		// leader. Wait reaps it, so no zombie is left.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-waited
		return ctx.Err()
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
		return nil
	case !errors.As(err, &exit):
		return fmt.Errorf("validator: the compile process: %w", err)
	}
	msg := strings.TrimSpace(stderr.String())
	switch exit.ExitCode() {
	case exitCompileError:
		return fmt.Errorf("%w: %s", ErrNotWasm, msg)
	case exitMemory:
		return fmt.Errorf("%w: compiling the module needed more than %d MiB of memory and was stopped", ErrLimit, DefaultCompileMemory>>20)
	case -1: // killed by a signal: RLIMIT_CPU, or someone else
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && (ws.Signal() == syscall.SIGKILL || ws.Signal() == syscall.SIGXCPU) {
			return &LimitError{Limit: LimitCompileTime, Msg: fmt.Sprintf("compiling the module took more than the %s limit of CPU time and was stopped", r.opts.compileTime)}
		}
	}
	return fmt.Errorf("validator: the compile process failed (%v): %s", err, msg)
}

// RunCompileProcess is the child side of WithCompileProcess: it parses
// args (what the runtime appended to the configured argv), reads a module
// on stdin and compiles it into the cache directory, under the CPU and
// memory limits the arguments give. It returns the process's exit code; a
// compile error goes to stderr.
func RunCompileProcess(args []string, stdin io.Reader, stderr io.Writer) int {
	fs := flag.NewFlagSet("compile", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cacheDir := fs.String("cache", "", "compilation cache directory")
	cpu := fs.Int64("cpu", 0, "RLIMIT_CPU, in seconds")
	memory := fs.Int64("memory", 0, "resident memory limit, in bytes")
	memoryLimit := fs.Int("memory-limit", 0, "the runtime's WithMemoryLimit")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if *cacheDir == "" || *cpu <= 0 || *memory <= 0 || *memoryLimit <= 0 {
		fmt.Fprintln(stderr, "validator compile process: -cache, -cpu, -memory and -memory-limit are required")
		return exitUsage
	}
	// At the soft limit Linux sends SIGXCPU, which the Go runtime ignores;
	// at the hard limit, SIGKILL.
	if err := syscall.Setrlimit(syscall.RLIMIT_CPU, &syscall.Rlimit{Cur: uint64(*cpu), Max: uint64(*cpu)}); err != nil {
		fmt.Fprintln(stderr, "validator compile process: RLIMIT_CPU:", err)
		return exitUsage
	}
	// RLIMIT_AS would break a binary built with -race, which reserves
	// terabytes of address space: the child watches its resident memory
	// instead, and asks the garbage collector to stay under it.
	debug.SetMemoryLimit(*memory)
	go watchMemory(*memory, stderr)
	wasm, err := io.ReadAll(stdin)
	if err != nil {
		fmt.Fprintln(stderr, "validator compile process: read the module:", err)
		return exitUsage
	}
	ctx := context.Background()
	cache, err := wazero.NewCompilationCacheWithDir(*cacheDir)
	if err != nil {
		fmt.Fprintln(stderr, "validator compile process:", err)
		return exitUsage
	}
	rt := wazero.NewRuntimeWithConfig(ctx, runtimeConfig(*memoryLimit).WithCompilationCache(cache))
	mod, err := rt.CompileModule(experimental.WithCompilationWorkers(ctx, compileWorkers), wasm)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitCompileError
	}
	_ = mod.Close(ctx)
	_ = rt.Close(ctx)
	_ = cache.Close(ctx)
	return 0
}

// watchMemory exits the process with exitMemory once its resident memory
// passes limit, checking every 50ms.
func watchMemory(limit int64, stderr io.Writer) {
	page := int64(os.Getpagesize())
	for range time.Tick(50 * time.Millisecond) {
		b, err := os.ReadFile("/proc/self/statm")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			continue
		}
		pages, err := strconv.ParseInt(f[1], 10, 64)
		if err == nil && pages*page > limit {
			fmt.Fprintf(stderr, "validator compile process: %d MiB resident, over the %d MiB limit\n", pages*page>>20, limit>>20)
			os.Exit(exitMemory)
		}
	}
}
