package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/internal/testkit/testtls"
)

// pawlAt runs one command line and returns its exit code and output.
func pawlAt(stdin string, args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, strings.NewReader(stdin), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// lastCall returns what the last call rec saw came with.
func lastCall(t *testing.T, rec *testtls.Recorder) testtls.Request {
	t.Helper()
	seen, _ := rec.Requests()
	if len(seen) == 0 {
		t.Fatal("no call reached the server")
	}
	return seen[len(seen)-1]
}

// TestTheCredentialsGoWithEveryCall: behind a listener that requires a
// client certificate from its CA, the CA, the certificate and the token,
// given by flags or by the environment, reach pawld on every protocol; a
// flag wins over the environment, even an empty --token; the token is
// taken from the flags or from the environment, not one from each.
func TestTheCredentialsGoWithEveryCall(t *testing.T) {
	srv := testserver.Start(t)
	pki := testtls.New(t)
	rec := testtls.Record(srv.Server.Handler())
	url := pki.Serve(t, rec)
	tls := []string{"--server", url, "--ca", pki.CA, "--cert", pki.ClientCert, "--key", pki.ClientKey}
	for _, proto := range []string{"connect", "grpc", "grpc-web"} {
		if code, out, errOut := pawlAt("", append(tls, "--protocol", proto, "--token", "pawl_flag", "put", "/app/a", "x")...); code != 0 {
			t.Fatalf("%s: exit %d: %s%s", proto, code, out, errOut)
		}
		if got := lastCall(t, rec); !strings.HasSuffix(got.Path, "/Put") || got.Authorization != "Bearer pawl_flag" || got.ClientID != testtls.ClientID {
			t.Fatalf("%s: the put came as %+v", proto, got)
		}
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("pawl_file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		env  map[string]string
		args []string
		want string // the Authorization header
	}{
		{"env token", map[string]string{"PAWL_TOKEN": "pawl_env"}, nil, "Bearer pawl_env"},
		{"env token file", map[string]string{"PAWL_TOKEN_FILE": tokenFile}, nil, "Bearer pawl_file"},
		{"flag over env", map[string]string{"PAWL_TOKEN": "pawl_env"}, []string{"--token", "pawl_flag"}, "Bearer pawl_flag"},
		{"token file flag over env token", map[string]string{"PAWL_TOKEN": "pawl_env"}, []string{"--token-file", tokenFile}, "Bearer pawl_file"},
		{"token flag over env token file", map[string]string{"PAWL_TOKEN_FILE": tokenFile}, []string{"--token", "pawl_flag"}, "Bearer pawl_flag"},
		{"empty flag over env", map[string]string{"PAWL_TOKEN": "pawl_env"}, []string{"--token", ""}, ""},
		{"env TLS files", map[string]string{"PAWL_TOKEN": "pawl_env", "PAWL_CA": pki.CA, "PAWL_CERT": pki.ClientCert, "PAWL_KEY": pki.ClientKey}, []string{"--server", url}, "Bearer pawl_env"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			args := c.args
			if c.env["PAWL_CA"] == "" {
				args = append(args, tls...)
			}
			if code, out, errOut := pawlAt("", append(args, "get", "/app/a")...); code != 0 || out != "x\n" {
				t.Fatalf("exit %d: %q %s", code, out, errOut)
			}
			if got := lastCall(t, rec); got.Authorization != c.want || got.ClientID != testtls.ClientID {
				t.Fatalf("the get came as %+v, want Authorization %q", got, c.want)
			}
		})
	}
	t.Run("both env tokens", func(t *testing.T) {
		t.Setenv("PAWL_TOKEN", "pawl_env")
		t.Setenv("PAWL_TOKEN_FILE", tokenFile)
		if code, _, errOut := pawlAt("", append(tls, "get", "/app/a")...); code != 2 || !strings.Contains(errOut, "PAWL_TOKEN and PAWL_TOKEN_FILE") {
			t.Fatalf("exit %d: %s", code, errOut)
		}
	})
	for _, args := range [][]string{
		{"--token", "a", "--token-file", tokenFile},
		{"--cert", pki.ClientCert},
	} {
		if code, _, errOut := pawlAt("", append(append([]string{"--server", url}, args...), "get", "/app/a")...); code != 2 {
			t.Errorf("%q: exit %d: %s", args, code, errOut)
		}
	}
	if code, _, errOut := pawlAt("", "--server", url, "--token-file", filepath.Join(t.TempDir(), "missing"), "get", "/app/a"); code != 1 || !strings.Contains(errOut, "--token-file") {
		t.Errorf("a missing token file: exit %d: %s", code, errOut)
	}
	if code, _, errOut := pawlAt("", "--server", url, "--cert", pki.ClientCert, "--key", pki.ClientKey, "get", "/app/a"); code != 1 || !strings.Contains(errOut, "certificate") {
		t.Errorf("without the CA: exit %d: %s", code, errOut)
	}
}

// TestTheCLIRefusesATokenInClearText: a token, by flag or environment, for
// an http:// server beyond loopback is a usage error naming the server,
// before any call; to loopback it goes.
func TestTheCLIRefusesATokenInClearText(t *testing.T) {
	for _, args := range [][]string{
		{"--server", "http://10.1.2.3:7070", "--token", "pawl_x", "get", "/a"},
		{"--server", "http://pawl.example.com:7070/", "--token", "pawl_x", "ls", "/"},
	} {
		if code, _, errOut := pawlAt("", args...); code != 2 || !strings.Contains(errOut, "clear text to "+strings.TrimSuffix(args[1], "/")) {
			t.Errorf("%q: exit %d: %s", args, code, errOut)
		}
	}
	t.Setenv("PAWL_TOKEN", "pawl_env")
	if code, _, errOut := pawlAt("", "--server", "http://10.1.2.3:7070", "get", "/a"); code != 2 || !strings.Contains(errOut, "clear text") {
		t.Errorf("PAWL_TOKEN: exit %d: %s", code, errOut)
	}
	srv := testserver.Start(t)
	rec := testtls.Record(srv.Server.Handler())
	url := testtls.ServeClear(t, rec)
	if code, _, errOut := pawlAt("", "--server", url, "put", "/a", "x"); code != 0 {
		t.Fatalf("loopback: exit %d: %s", code, errOut)
	}
	if got := lastCall(t, rec); got.Authorization != "Bearer pawl_env" {
		t.Fatalf("loopback: the put came as %+v", got)
	}
}

// TestTokenCreate: the token is printed on stdout in the auth file's
// format, its entry on stderr carries the sha256 of the printed token,
// the principal and the expiry, and says the token is stored nowhere; two
// tokens differ; `pawl token hash` gives the same hash; no credential is
// read, so a broken one in the environment does not matter.
func TestTokenCreate(t *testing.T) {
	t.Setenv("PAWL_TOKEN_FILE", filepath.Join(t.TempDir(), "missing"))
	format := regexp.MustCompile(`^pawl_[A-Za-z0-9_-]{43}$`)
	var tokens []string
	for range 2 {
		code, out, errOut := pawlAt("", "token", "create", "--principal", "ci-deployer", "--expires", "90d")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		token := strings.TrimSuffix(out, "\n")
		if !format.MatchString(token) {
			t.Fatalf("stdout %q is not one token", out)
		}
		sum := sha256.Sum256([]byte(token))
		fields := map[string]string{}
		for _, line := range strings.Split(errOut, "\n") {
			k, v, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "- "), ": ")
			if ok && !strings.HasPrefix(line, "#") {
				fields[k] = v
			}
		}
		if fields["hash"] != "sha256:"+hex.EncodeToString(sum[:]) || fields["principal"] != "ci-deployer" {
			t.Fatalf("the entry does not match the token %s: %q", token, errOut)
		}
		expires, err := time.Parse(time.RFC3339, fields["expires"])
		if want := time.Now().Add(90 * 24 * time.Hour); err != nil || expires.Sub(want).Abs() > time.Minute {
			t.Fatalf("expires %q (%v), want about %s", fields["expires"], err, want)
		}
		if !strings.Contains(errOut, "not stored anywhere") {
			t.Fatalf("stderr does not say the token is not stored: %q", errOut)
		}
		code, out, errOut = pawlAt(token+"\n", "token", "hash")
		if code != 0 || out != fields["hash"]+"\n" {
			t.Fatalf("token hash: exit %d, %q %s", code, out, errOut)
		}
		tokens = append(tokens, token)
	}
	if tokens[0] == tokens[1] {
		t.Fatalf("two runs printed the same token %s", tokens[0])
	}
	if code, out, errOut := pawlAt("", "token", "create", "--principal", "spiffe://prod/ns/a", "-o", "json"); code != 0 || !strings.Contains(out, `"principal":"spiffe://prod/ns/a"`) || !strings.Contains(errOut, "- principal: spiffe://prod/ns/a\n") {
		t.Fatalf("-o json: exit %d, %q %q", code, out, errOut)
	}
	if code, _, errOut := pawlAt("", "token", "create", "--principal", "ci\u200bdeployer"); code != 2 || !strings.Contains(errOut, "U+200B (zero width space) at byte 2") {
		t.Errorf("a principal with a zero width space: exit %d, %s", code, errOut)
	}
	for _, args := range [][]string{
		{"token", "create"},
		{"token", "create", "--principal", ""},
		{"token", "create", "--principal", "a\nb"},
		{"token", "create", "--principal", "ci\u200bdeployer"},
		{"token", "create", "--principal", "d\u00e9ployeur"},
		{"token", "create", "--principal", strings.Repeat("a", 256)},
		{"token", "create", "--principal", "a", "--expires", "-1h"},
		{"token", "create", "--principal", "a", "--expires", "0d"},
		{"token", "create", "--principal", "a", "--expires", "soon"},
		{"token", "hash"},
	} {
		if code, out, errOut := pawlAt("", args...); code != 2 || out != "" {
			t.Errorf("%q: exit %d, %q %s", args, code, out, errOut)
		}
	}
}
