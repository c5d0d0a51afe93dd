package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/pawlcfg/pawl/internal/testkit/testserver"
)

// TestOpenServerStaysOnLoopback: without --auth-file pawld says at start
// that everybody may do everything, refuses a non-loopback --listen
// unless --insecure, and warns that what travels is in clear text.
func TestOpenServerStaysOnLoopback(t *testing.T) {
	p := startPawldWith(t, "--listen", "127.0.0.1:0", "--data", t.TempDir())
	if !seen(p, "no --auth-file: every caller is principal anonymous and may do everything; listening on loopback only") {
		t.Errorf("pawld did not say it is open: %v", p.seen)
	}
	p.stop(t)

	out, err := exec.Command(pawldBinary, "--listen", "0.0.0.0:0", "--data", t.TempDir()).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "reaches beyond loopback") || !strings.Contains(string(out), "--insecure") {
		t.Errorf("an open pawld beyond loopback: %v: %s", err, out)
	}

	p = startPawldWith(t, "--listen", "0.0.0.0:0", "--insecure", "--data", t.TempDir())
	if !seen(p, "no --auth-file, and --insecure: every caller that can reach the port may do everything") ||
		!seen(p, "serving without TLS beyond loopback: bearer tokens, config values, release contents, validator modules and ACKs travel in clear text; give --tls-cert and --tls-key") {
		t.Errorf("pawld --insecure did not warn: %v", p.seen)
	}
	p.stop(t)
}

func seen(p *pawld, msg string) bool {
	for _, line := range p.seen {
		if line["msg"] == msg {
			return true
		}
	}
	return false
}

// TestAuthFileAndHangup: a malformed auth file stops pawld at start with
// the entry and line; SIGHUP reads the file again, and a bad one is
// logged and left aside.
func TestAuthFileAndHangup(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "auth.yaml")
	if err := os.WriteFile(path, []byte("tokens:\n  - principal: ci\n    hash: sha256:nothex\n    grants: [{role: admin}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(pawldBinary, "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--auth-file", path).CombinedOutput()
	if err == nil || !strings.Contains(string(out), `tokens[0] (line 2, principal "ci"): hash must be sha256:`) {
		t.Errorf("pawld with a malformed auth file: %v: %s", err, out)
	}
	_, hash := testserver.NewToken(t)
	good := "tokens:\n  - principal: ci\n    hash: " + hash + "\n    grants: [{role: admin}]\n"
	if err := os.WriteFile(path, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startPawldWith(t, "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--auth-file", path)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if line := p.await(t, "auth file reloaded"); line["tokens"] != float64(1) {
		t.Errorf("reload: %v", line)
	}
	if err := os.WriteFile(path, []byte("tokens: [oops"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.await(t, "auth file not reloaded; the previous one stays in use")
	p.stop(t)
}
