package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/internal/testkit/testtls"
)

// TestTheCredentialFlagsReachTheSDK: behind a listener that requires a
// client certificate from its CA, an agent given a token file, the CA and
// the certificate by flags mirrors a prefix, and one given a token, the CA
// and the certificate by the environment registers; every call of both
// came with their token and certificate.
func TestTheCredentialFlagsReachTheSDK(t *testing.T) {
	srv := testserver.Start(t)
	pki := testtls.New(t)
	rec := testtls.Record(srv.Server.Handler())
	url := pki.Serve(t, rec)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("pawl_from_file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	lines := runAgent(t, "--server", url, "--no-assignments", "--prefix", "/flags/", "--dir", t.TempDir(),
		"--token-file", tokenFile, "--ca", pki.CA, "--cert", pki.ClientCert, "--key", pki.ClientKey)
	await(t, lines, "mirrored 0 keys under /flags/")

	t.Setenv("PAWL_TOKEN", "pawl_from_env")
	t.Setenv("PAWL_CA", pki.CA)
	t.Setenv("PAWL_CERT", pki.ClientCert)
	t.Setenv("PAWL_KEY", pki.ClientKey)
	runAgent(t, "--server", url, "--identity", "env-1", "--dir", t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		seen, next := rec.Requests()
		var listed, registered bool
		for _, r := range seen {
			listed = listed || strings.HasSuffix(r.Path, "/List") && r.Authorization == "Bearer pawl_from_file"
			registered = registered || strings.HasSuffix(r.Path, "/Session") && r.Authorization == "Bearer pawl_from_env"
			if r.ClientID != testtls.ClientID || (r.Authorization != "Bearer pawl_from_file" && r.Authorization != "Bearer pawl_from_env") {
				t.Fatalf("%s came with Authorization %q and client %q", r.Path, r.Authorization, r.ClientID)
			}
		}
		if listed && registered {
			return
		}
		select {
		case <-next:
		case <-ctx.Done():
			t.Fatalf("listed with the file's token: %v, registered with the environment's: %v; calls %+v", listed, registered, seen)
		}
	}
}

// TestTheAgentRefusesATokenInClearText: a token for an http:// server
// beyond loopback stops the agent at once, naming the server.
func TestTheAgentRefusesATokenInClearText(t *testing.T) {
	var stderr strings.Builder
	code := run(context.Background(), []string{"--server", "http://10.1.2.3:7070", "--token", "pawl_x", "--no-assignments", "--prefix", "/flags/", "--dir", t.TempDir()}, io.Discard, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "clear text to http://10.1.2.3:7070") {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
}

// TestCredentialUsageErrors: a token given twice, or a certificate without
// its key, is a usage error.
func TestCredentialUsageErrors(t *testing.T) {
	base := []string{"--dir", t.TempDir(), "--no-assignments", "--prefix", "/flags/"}
	for _, args := range [][]string{
		{"--token", "a", "--token-file", "f"},
		{"--cert", "c.pem"},
		{"--key", "k.pem"},
	} {
		var stderr strings.Builder
		if code := run(context.Background(), append(args, base...), io.Discard, &stderr); code != 2 || stderr.Len() == 0 {
			t.Errorf("%q: exit %d, %q", args, code, stderr.String())
		}
	}
}
