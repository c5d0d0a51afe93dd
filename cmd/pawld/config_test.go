package main_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestConfigFileEnvironmentAndFlags starts the real binary with its
// settings in a config file, then with PAWL_DATA_DIR over the file, then
// with --data over both, and reads where each serves from.
func TestConfigFileEnvironmentAndFlags(t *testing.T) {
	dir := t.TempDir()
	fromFile, fromEnv, fromFlag := filepath.Join(dir, "file"), filepath.Join(dir, "env"), filepath.Join(dir, "flag")
	cfg := filepath.Join(dir, "pawld.yaml")
	if err := os.WriteFile(cfg, []byte("# pawld settings\nlisten: 127.0.0.1:0\ndata: "+fromFile+"\nlog-level: \"debug\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	served := func(args ...string) string {
		t.Helper()
		p := startPawldWith(t, args...)
		data, _ := p.seen[len(p.seen)-1]["data"].(string)
		p.stop(t)
		return data
	}
	if got := served("--config", cfg); got != fromFile {
		t.Fatalf("with the file: data %q, want %q", got, fromFile)
	}
	t.Setenv("PAWL_DATA_DIR", fromEnv)
	if got := served("--config", cfg); got != fromEnv {
		t.Fatalf("with the file and PAWL_DATA_DIR: data %q, want %q", got, fromEnv)
	}
	t.Setenv("PAWL_CONFIG", cfg) // the file, named by the environment
	if got := served("--data", fromFlag); got != fromFlag {
		t.Fatalf("with --data: data %q, want %q", got, fromFlag)
	}
}

// TestBadConfigIsAnErrorNamingTheLine: pawld refuses to start on an
// unknown key of its config file, or a bad PAWL_* value, saying where.
func TestBadConfigIsAnErrorNamingTheLine(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "pawld.yaml")
	if err := os.WriteFile(cfg, []byte("listen: 127.0.0.1:0\n\nlisten-adress: 127.0.0.1:7071\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a pawld that started anyway is killed
	defer cancel()
	out, err := exec.CommandContext(ctx, pawldBinary, "--config", cfg).CombinedOutput()
	if err == nil || !strings.Contains(string(out), cfg+` line 3: unknown key "listen-adress"`) {
		t.Fatalf("pawld with an unknown key = %v, %q", err, out)
	}
	cmd := exec.CommandContext(ctx, pawldBinary, "--listen", "127.0.0.1:0", "--data", t.TempDir())
	cmd.Env = append(os.Environ(), "PAWL_MAX_VALUE_BYTES=lots")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), `PAWL_MAX_VALUE_BYTES="lots": --max-value-bytes`) {
		t.Fatalf("pawld with a bad PAWL_MAX_VALUE_BYTES = %v, %q", err, out)
	}
}

// TestVersionAndCompletion: --version names the build; completion prints
// a script for each shell listing the flags.
func TestVersionAndCompletion(t *testing.T) {
	out, err := exec.Command(pawldBinary, "--version").Output()
	if err != nil || !strings.HasPrefix(string(out), "pawld ") || !strings.Contains(string(out), "(commit ") {
		t.Fatalf("pawld --version = %v, %q", err, out)
	}
	for shell, want := range map[string]string{"bash": "--data-dir", "zsh": "'--config[", "fish": "complete -c pawld -l version"} {
		out, err := exec.Command(pawldBinary, "completion", shell).Output()
		if err != nil || !strings.Contains(string(out), want) {
			t.Errorf("pawld completion %s = %v, %q; want %q", shell, err, out, want)
		}
	}
	if out, err := exec.Command(pawldBinary, "completion", "tcsh").CombinedOutput(); err == nil || !strings.Contains(string(out), "want bash, zsh or fish") {
		t.Errorf("pawld completion tcsh = %v, %q", err, out)
	}
}

// TestCORSOriginFromEveryPlace: --cors-origin may be repeated and hold
// commas, and PAWL_CORS_ORIGIN and the config file set it like any flag;
// each listed origin's preflight is answered for a browser, and no other.
func TestCORSOriginFromEveryPlace(t *testing.T) {
	allowed := func(p *pawld, origin string) bool {
		t.Helper()
		req, err := http.NewRequest(http.MethodOptions, "http://"+p.addr+"/pawl.v1.KVService/Put", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusNoContent && resp.Header.Get("Access-Control-Allow-Origin") == origin
	}
	check := func(p *pawld, want []string, deny ...string) {
		t.Helper()
		for _, o := range want {
			if !allowed(p, o) {
				t.Errorf("origin %s is not allowed", o)
			}
		}
		for _, o := range append(deny, "https://evil.example") {
			if allowed(p, o) {
				t.Errorf("unlisted origin %s is allowed", o)
			}
		}
		p.stop(t)
	}
	check(startPawldWith(t, "--listen", "127.0.0.1:0", "--data", t.TempDir(),
		"--cors-origin", "https://a.example", "--cors-origin", "https://b.example, http://localhost:5173"),
		[]string{"https://a.example", "https://b.example", "http://localhost:5173"})

	cfg := filepath.Join(t.TempDir(), "pawld.yaml")
	if err := os.WriteFile(cfg, []byte("cors-origin: https://file.example\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	check(startPawldWith(t, "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--config", cfg), []string{"https://file.example"})
	t.Setenv("PAWL_CORS_ORIGIN", "https://env.example,https://env2.example")
	check(startPawldWith(t, "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--config", cfg),
		[]string{"https://env.example", "https://env2.example"}, "https://file.example")
}
