package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/pawlcfg/pawl/internal/testkit/wasmbuild"
	"github.com/pawlcfg/pawl/validators/abitest"
)

// pawlOffline runs one command line that calls no server: the server URL
// is not even valid, which only such a command accepts.
func pawlOffline(t *testing.T, dir string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	args = append([]string{"--server", "not a url"}, args...)
	if dir != "" {
		t.Chdir(dir)
	}
	code := run(context.Background(), args, strings.NewReader(""), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// buildGo builds the Go validator project in dir as its README says.
func buildGo(t *testing.T, dir, out string) {
	t.Helper()
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	cmd := exec.Command(goTool, "build", "-buildmode=c-shared", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the new project: %v\n%s", err, msg)
	}
}

// TestValidatorNewThenTest writes a Go project with pawl validator new,
// builds it with the command its README gives, and runs pawl validator
// test on it with its cases: every check passes.
func TestValidatorNewThenTest(t *testing.T) {
	work := t.TempDir()
	code, out, errOut := pawlOffline(t, work, "validator", "new", "--lang", "go", "payments-limits")
	if code != 0 || !strings.Contains(out, "payments-limits/main.go\n") || !strings.Contains(out, "payments-limits/cases/valid.expect.json\n") {
		t.Fatalf("validator new = %d, %q, %q", code, out, errOut)
	}
	project := filepath.Join(work, "payments-limits")
	readme, err := os.ReadFile(filepath.Join(project, "README.md"))
	if err != nil || !strings.Contains(string(readme), "GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o payments-limits.wasm .") {
		t.Fatalf("the project's README does not give its build command: %v\n%s", err, readme)
	}
	buildGo(t, project, "payments-limits.wasm")
	code, out, errOut = pawlOffline(t, project, "validator", "test", "payments-limits.wasm", "--cases", "cases", "--validator-cache", wasmbuild.CacheDir(t))
	if code != 0 || !strings.Contains(out, "PASS  case single-replica") || !strings.Contains(out, ": 22 passed, 0 failed, 0 skipped\n") {
		t.Fatalf("validator test of the new project = %d:\n%s\n%s", code, out, errOut)
	}

	// The author breaks the validator: the case that covers it fails, and
	// so does the command.
	main := filepath.Join(project, "main.go")
	src, err := os.ReadFile(main)
	if err != nil {
		t.Fatal(err)
	}
	broken := strings.Replace(string(src), "*s.Replicas > 100", "*s.Replicas > 1000", 1)
	if err := os.WriteFile(main, []byte(broken), 0o600); err != nil {
		t.Fatal(err)
	}
	buildGo(t, project, "broken.wasm")
	code, out, _ = pawlOffline(t, project, "validator", "test", "broken.wasm", "--cases", "cases", "-o", "json", "--validator-cache", wasmbuild.CacheDir(t))
	var rep abitest.Report
	if err := json.Unmarshal([]byte(out), &rep); code != 1 || err != nil {
		t.Fatalf("validator test of a broken validator = %d (%v):\n%s", code, err, out)
	}
	c, _ := rep.Find(abitest.CasePrefix + "too-many-replicas")
	if c.Status != abitest.Fail || !strings.Contains(c.Detail, "want invalid, got valid") || c.Result == nil || !c.Result.Valid {
		t.Fatalf("the case of the broken rule: %+v", c)
	}
}

func TestValidatorTestReportsAHostileModule(t *testing.T) {
	module := writeFile(t, "stateful.wasm", wasmbuild.Build(t, "hostile/stateful"))
	code, out, _ := pawlOffline(t, "", "validator", "test", module, "--validator-cache", wasmbuild.CacheDir(t))
	if code != 1 || !strings.Contains(out, "FAIL  isolation: earlier calls") || !strings.Contains(out, "FAILED sha256:") {
		t.Fatalf("validator test of hostile/stateful = %d:\n%s", code, out)
	}
	forbidden := writeFile(t, "forbidden.wasm", wasmbuild.Build(t, "hostile/forbidden"))
	code, out, _ = pawlOffline(t, "", "validator", "test", forbidden)
	if code != 1 || !strings.Contains(out, "FAIL  imports") || !strings.Contains(out, "import env.pawl_escape is not allowed") ||
		!strings.Contains(out, "SKIP  load") {
		t.Fatalf("validator test of hostile/forbidden = %d:\n%s", code, out)
	}
}

func TestValidatorKitCommandErrors(t *testing.T) {
	work := t.TempDir()
	if err := os.Mkdir(filepath.Join(work, "taken"), 0o755); err != nil {
		t.Fatal(err)
	}
	emptyCases := filepath.Join(work, "empty")
	if err := os.Mkdir(emptyCases, 0o755); err != nil {
		t.Fatal(err)
	}
	module := writeFile(t, "m.wasm", []byte("not wasm"))
	cases := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"validator", "new", "x"}, 2, "give --lang, one of go, rust, assemblyscript"},
		{[]string{"validator", "new", "--lang", "cobol", "x"}, 1, `language "cobol"`},
		{[]string{"validator", "new", "--lang", "go", "Bad_Name"}, 1, `project name "Bad_Name"`},
		{[]string{"validator", "new", "--lang", "go", filepath.Join(work, "taken")}, 1, "taken exists; give the name of a new directory"},
		{[]string{"validator", "test"}, 2, "accepts 1 arg"},
		{[]string{"validator", "test", filepath.Join(work, "missing.wasm")}, 1, "read module"},
		{[]string{"validator", "test", module, "--cases", emptyCases}, 1, "has no NAME.expect.json file"},
		{[]string{"validator", "test", module, "--params", filepath.Join(work, "missing.json")}, 1, "read params"},
		{[]string{"validator", "test", module, "--params", writeFile(t, "p.json", []byte("{"))}, 1, "the parameters are not a JSON document"},
		{[]string{"validator", "test", module, "--validator-memory-bytes", "1000"}, 1, "must be a positive multiple of 64 KiB"},
	}
	for _, c := range cases {
		code, _, errOut := pawlOffline(t, "", c.args...)
		if code != c.code || !strings.Contains(errOut, c.msg) {
			t.Errorf("pawl %v = %d, %q; want %d and %q", c.args, code, errOut, c.code, c.msg)
		}
	}
	code, out, _ := pawlOffline(t, "", "validator", "test", module)
	if code != 1 || !strings.Contains(out, "FAIL  wasm format") {
		t.Errorf("validator test of bytes that are not wasm = %d:\n%s", code, out)
	}
}
