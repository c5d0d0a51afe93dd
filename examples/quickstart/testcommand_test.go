//go:build unix

package quickstart

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTheTestCommandRunsEveryPass runs .ci/test, the README's test command,
// with a stand-in for go that fails the first pass (the embedded store's):
// the pass after it must still run, and the command must fail naming the
// pass that failed.
func TestTheTestCommandRunsEveryPass(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash on PATH")
	}
	bin := t.TempDir()
	calls := filepath.Join(bin, "calls")
	stub := "#!/bin/sh\n" +
		`echo "store=${PAWL_TEST_STORE:-} auth=${PAWL_TEST_AUTH:-} $*" >>"` + calls + "\"\n" +
		`[ "${PAWL_TEST_STORE:-}" = redis ]` + "\n"
	if err := os.WriteFile(filepath.Join(bin, "go"), []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bash, filepath.Join("..", "..", ".ci", "test"), "-run", "TestX")
	// The passes this test itself runs in (PAWL_TEST_STORE=redis in the
	// Redis pass) must not leak into the passes it checks.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PAWL_TEST_STORE=") && !strings.HasPrefix(kv, "PAWL_TEST_AUTH=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); err == nil || code != 1 {
		t.Fatalf(".ci/test with a failing first pass exited %d (%v), want 1:\n%s", code, err, out)
	}
	if !strings.Contains(string(out), "FAILED: embedded store (") {
		t.Errorf(".ci/test does not name the pass that failed:\n%s", out)
	}
	got, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	want := "store= auth= test -race -count=1 -timeout 20m ./... -run TestX\n" +
		"store=redis auth=1 test -race -count=1 -timeout 20m ./server ./sdk ./cmd/... ./examples/... -run TestX\n"
	if string(got) != want {
		t.Errorf(".ci/test ran\n%s\nwant every pass, the one after the failure too:\n%s", got, want)
	}
}
