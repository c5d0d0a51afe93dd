// Package pawldtest runs the real pawld binary for tests that must kill a
// server the way a machine dies (SIGKILL: no drain, no lease released):
// it builds cmd/pawld once per test binary, starts processes on free
// loopback ports and stops them when the test ends.
package pawldtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pawlcfg/pawl/internal/testkit/redistest"
)

var (
	buildOnce sync.Once
	buildDir  string
	binary    string
	buildErr  error
)

// Binary builds pawld (once per test binary) and returns its path.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..", "..")
		if buildDir, buildErr = os.MkdirTemp("", "pawldtest"); buildErr != nil {
			return
		}
		binary = filepath.Join(buildDir, "pawld")
		cmd := exec.Command("go", "build", "-o", binary, "./cmd/pawld")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("build pawld: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

// Cleanup removes the built binary; call it from TestMain after the tests.
func Cleanup() {
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
}

// Process is a running pawld.
type Process struct {
	// URL is its base URL, http://127.0.0.1:PORT.
	URL string
	// Addr is its listening address.
	Addr string
	// Pid is its process ID.
	Pid int

	cmd  *exec.Cmd
	mu   sync.Mutex
	logs bytes.Buffer
	done chan struct{}
}

// Start runs pawld with args (besides --listen, --log-format and
// --validator-timeout, which it sets and args may override) and waits
// until it listens. The test's cleanup kills it if it is still running,
// and logs its output when the test failed.
func Start(t testing.TB, args ...string) *Process {
	t.Helper()
	// A generous validator limit, as testserver sets: it is wall-clock
	// time, and the tests share two cores under -race. args may set it.
	cmd := exec.Command(Binary(t), append([]string{"--listen", "127.0.0.1:0", "--log-format", "json", "--validator-timeout", "30s"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Process{cmd: cmd, Pid: cmd.Process.Pid, done: make(chan struct{})}
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.logs.Write(sc.Bytes())
			p.logs.WriteByte('\n')
			p.mu.Unlock()
			var line struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "pawld listening" {
				listening <- line.Addr
			}
		}
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("pawld %d logs:\n%s", p.Pid, p.Logs())
		}
	})
	select {
	case p.Addr = <-listening:
	case <-p.done:
		t.Fatalf("pawldtest: pawld exited before listening:\n%s", p.Logs())
	case <-time.After(30 * time.Second):
		t.Fatalf("pawldtest: pawld did not listen within 30s:\n%s", p.Logs())
	}
	p.URL = "http://" + p.Addr
	return p
}

// Logs returns what the process logged so far.
func (p *Process) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// Kill kills the process with SIGKILL and waits for it to exit.
func (p *Process) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop stops the process with SIGTERM (a graceful stop) and waits for it.
func (p *Process) Stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.done
}

// Exited is closed when the process exits.
func (p *Process) Exited() <-chan struct{} { return p.done }

// Replicas starts n pawld processes that share one store in the shared
// test Redis (internal/redistest) under prefix, each with its own data
// directory, a one-second work lease and the extra args.
func Replicas(t testing.TB, n int, prefix string, extra ...string) []*Process {
	t.Helper()
	out := make([]*Process, n)
	for i := range out {
		out[i] = Start(t, append([]string{"--data", t.TempDir(), "--store", "redis://" + redistest.Addr() + "/0",
			"--redis-prefix", prefix, "--work-lease", "1s"}, extra...)...)
	}
	return out
}
