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

// projects are the languages of pawl validator new, each with how its
// project is built as its README says, and where the module lands.
var projects = []struct {
	lang  string
	need  []string // what the build needs; missing, the test skips (fails under CI)
	build func(t *testing.T, dir string) string
}{
	{"go", nil, func(t *testing.T, dir string) string {
		buildIn(t, dir, nil, filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-buildmode=c-shared", "-o", "module.wasm", ".")
		return "module.wasm"
	}},
	{"rust", []string{"/usr/bin/cargo", "/usr/bin/rustc", "/usr/lib/rustlib/wasm32-unknown-unknown"}, func(t *testing.T, dir string) string {
		buildIn(t, dir, []string{"RUSTC=/usr/bin/rustc", "CARGO_TARGET_DIR=" + filepath.Join(dir, "target")},
			"/usr/bin/cargo", "build", "--offline", "--quiet", "--release", "--target", "wasm32-unknown-unknown")
		return filepath.Join("target", "wasm32-unknown-unknown", "release", strings.ReplaceAll(filepath.Base(dir), "-", "_")+".wasm")
	}},
	{"assemblyscript", []string{repoNodeModules(), "npm"}, func(t *testing.T, dir string) string {
		// npm ci would fetch the compiler its lockfile pins; the
		// repository's node_modules holds the same version (a test of
		// package validators checks the lockfiles agree).
		if err := os.Symlink(repoNodeModules(), filepath.Join(dir, "node_modules")); err != nil {
			t.Fatal(err)
		}
		npm, _ := exec.LookPath("npm")
		buildIn(t, dir, nil, npm, "run", "build")
		return filepath.Base(dir) + ".wasm"
	}},
}

func repoNodeModules() string {
	return filepath.Join(wasmbuild.Examples(), "..", "..", "node_modules")
}

// buildIn runs a build command in dir, for wasip1 where Go is concerned.
func buildIn(t *testing.T, dir string, env []string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=")
	cmd.Env = append(cmd.Env, env...)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the new project: %s %q: %v\n%s", name, args, err, msg)
	}
}

// need skips the test unless every path exists (or, without a slash, is
// on PATH); under CI it fails instead.
func need(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		var err error
		if strings.Contains(p, "/") {
			_, err = os.Stat(p)
		} else {
			_, err = exec.LookPath(p)
		}
		if err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("the toolchain is missing under CI: %v", err)
			}
			t.Skipf("the toolchain is not installed: %v", err)
		}
	}
}

// TestValidatorNewThenTest writes a project in each language with pawl
// validator new, builds it as its README says, and runs pawl validator
// test on it with its cases: every check passes.
func TestValidatorNewThenTest(t *testing.T) {
	for _, p := range projects {
		t.Run(p.lang, func(t *testing.T) {
			need(t, p.need...)
			work := t.TempDir()
			code, out, errOut := pawlOffline(t, work, "validator", "new", "--lang", p.lang, "payments-limits")
			if code != 0 || !strings.Contains(out, "payments-limits/README.md\n") || !strings.Contains(out, "payments-limits/cases/valid.expect.json\n") {
				t.Fatalf("validator new = %d, %q, %q", code, out, errOut)
			}
			project := filepath.Join(work, "payments-limits")
			module := p.build(t, project)
			// A generous time limit: the machine running the tests may be loaded.
			code, out, errOut = pawlOffline(t, project, "validator", "test", module, "--cases", "cases", "--validator-cache", wasmbuild.CacheDir(t), "--validator-timeout", "10s")
			if code != 0 || !strings.Contains(out, "PASS  case single-replica") || !strings.Contains(out, ": 22 passed, 0 failed, 0 skipped\n") {
				t.Fatalf("validator test of the new project = %d:\n%s\n%s", code, out, errOut)
			}
		})
	}
}

// TestAValidatorThatBreaksACaseFailsTheTest: the author breaks the new Go
// project's rule; the case that covers it fails, and so does the command.
func TestAValidatorThatBreaksACaseFailsTheTest(t *testing.T) {
	work := t.TempDir()
	if code, _, errOut := pawlOffline(t, work, "validator", "new", "--lang", "go", "limits"); code != 0 {
		t.Fatal(errOut)
	}
	project := filepath.Join(work, "limits")
	main := filepath.Join(project, "main.go")
	src, err := os.ReadFile(main)
	if err != nil {
		t.Fatal(err)
	}
	broken := strings.Replace(string(src), "*s.Replicas > 100", "*s.Replicas > 1000", 1)
	if broken == string(src) {
		t.Fatal("the template's rule is not where the test looks for it")
	}
	if err := os.WriteFile(main, []byte(broken), 0o600); err != nil {
		t.Fatal(err)
	}
	module := projects[0].build(t, project)
	code, out, _ := pawlOffline(t, project, "validator", "test", module, "--cases", "cases", "-o", "json", "--validator-cache", wasmbuild.CacheDir(t), "--validator-timeout", "10s")
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
	code, out, _ := pawlOffline(t, "", "validator", "test", module, "--validator-cache", wasmbuild.CacheDir(t), "--validator-timeout", "10s")
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
