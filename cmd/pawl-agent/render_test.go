package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
)

// writeTemplate writes a template file and returns its path.
func writeTemplate(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "app.tmpl")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// appTemplate reads two keys, lists a prefix, and decodes a config.
const appTemplate = `host={{key "/app/db/host"}} port={{key "/app/db/port"}}
{{range keys "/app/feature/"}}{{.Key}}={{.Value}}
{{end}}upstream={{(index (json (config "routing")).upstreams 0).host}}
`

// TestATemplateRendersManyKeysAndAConfig: one file from two keys, a
// prefix and a config, rendered once the config arrives, and again, with
// --exec once, after a transaction changes two of its keys.
func TestATemplateRendersManyKeysAndAConfig(t *testing.T) {
	srv, ctx, client, digest, records := startWatchingRecords(t)
	kv, put := kvClient(t, srv)
	for key, value := range map[string]string{"/app/db/host": "db1", "/app/db/port": "5432", "/app/feature/x": "on"} {
		put(key, value)
	}
	dir := t.TempDir()
	dest := filepath.Join(dir, "etc", "app.conf")
	lines := runAgent(t, "--server", srv.URL, "--identity", "agent-1", "--dir", dir, "--prefix", "/app/",
		"--template", writeTemplate(t, appTemplate)+":etc/app.conf", "--exec", "echo exec sees $(tr '\\n' ' ' < "+dest+")")
	await(t, lines, "mirrored 3 keys under /app/")
	// No config yet: the template fails, and says why.
	await(t, lines, "config routing has no snapshot yet")
	awaitRegistered(t, records, "agent-1")
	createRelease(t, ctx, pawlv1connect.NewReleaseServiceClient(client, srv.URL), "routing", digest, []byte(`{"upstreams":[{"host":"up1","weight":100}]}`))
	await(t, lines, "rendered ")
	want := "host=db1 port=5432\n/app/feature/x=on\nupstream=up1\n"
	if got, err := os.ReadFile(dest); err != nil || string(got) != want {
		t.Fatalf("%s = %q, %v; want %q", dest, got, err, want)
	}
	if _, err := kv.Txn(ctx, connect.NewRequest(&pawlv1.TxnRequest{Ops: []*pawlv1.TxnOp{
		{Key: "/app/db/host", Value: []byte("db2")}, {Key: "/app/db/port", Value: []byte("6432")},
	}})); err != nil {
		t.Fatal(err)
	}
	if got := nextExec(t, lines); !strings.HasPrefix(got, "host=db1") {
		t.Fatalf("the run after the release saw %q", got)
	}
	if got := nextExec(t, lines); got != "host=db2 port=6432 /app/feature/x=on upstream=up1" {
		t.Fatalf("the run after the transaction saw %q, want both keys changed", got)
	}
}

// runOnce runs the agent with --once and returns its exit code, output
// and log.
func runOnce(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args = append(args, "--once", "--cache-dir", t.TempDir())
	var stdout, stderr strings.Builder
	code := run(ctx, args, &syncWriter{w: &stdout}, &syncWriter{w: &stderr})
	return code, stdout.String(), stderr.String()
}

// TestOnceRendersAndExits: --once writes the keys and the template, runs
// --exec once and exits 0; a template that fails, or an --exec that
// fails, exits 1 and says why.
func TestOnceRendersAndExits(t *testing.T) {
	srv := testserver.Start(t)
	_, put := kvClient(t, srv)
	put("/app/db/host", "db1")
	put("/app/db/port", "5432")
	dir := t.TempDir()
	tmpl := writeTemplate(t, `{{key "/app/db/host"}}:{{key "/app/db/port"}}`)
	code, out, log := runOnce(t, "--server", srv.URL, "--no-assignments", "--prefix", "/app/", "--dir", dir,
		"--template", tmpl+":db.addr", "--exec", "echo ran")
	if code != 0 || strings.Count(out, "ran\n") != 1 {
		t.Fatalf("--once: exit %d, output %q, log %q; want 0 and one run", code, out, log)
	}
	for rel, want := range map[string]string{"db.addr": "db1:5432", "kv/db/host": "db1"} {
		if got, err := os.ReadFile(filepath.Join(dir, rel)); err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", rel, got, err, want)
		}
	}

	missing := writeTemplate(t, `{{key "/app/db/user"}}`)
	code, _, log = runOnce(t, "--server", srv.URL, "--no-assignments", "--prefix", "/app/", "--dir", t.TempDir(), "--template", missing+":user")
	if code != 1 || !strings.Contains(log, "key /app/db/user does not exist") {
		t.Errorf("--once with a missing key: exit %d, %q; want 1 naming the key", code, log)
	}
	code, _, log = runOnce(t, "--server", srv.URL, "--no-assignments", "--prefix", "/app/", "--dir", t.TempDir(), "--exec", "echo no; exit 4")
	if code != 1 || !strings.Contains(log, "exit status 4") {
		t.Errorf("--once with a failing --exec: exit %d, %q; want 1", code, log)
	}
}

// get fetches url and returns its status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestTheEndpointServesTheSnapshotAndReadiness: --listen serves keys and
// configs as the files hold them; /ready says 503, naming the config it
// waits for, until that config is written, then 200.
func TestTheEndpointServesTheSnapshotAndReadiness(t *testing.T) {
	srv, ctx, client, digest, records := startWatchingRecords(t)
	_, put := kvClient(t, srv)
	put("/app/a", "1")
	dir := t.TempDir()
	lines := runAgent(t, "--server", srv.URL, "--identity", "agent-1", "--config", "routing", "--dir", dir, "--prefix", "/app/",
		"--listen", "127.0.0.1:0", "--exec", "echo exec done")
	base := strings.TrimPrefix(await(t, lines, "serving the snapshot on "), "serving the snapshot on ")
	await(t, lines, "exec done") // the initial sync
	for path, want := range map[string]struct {
		code int
		body string
	}{
		"/healthz":            {200, "ok"},
		"/ready":              {503, "config routing has no snapshot yet"},
		"/v1/kv/app/a":        {200, "1"},
		"/v1/kv/app/b":        {404, "no key"},
		"/v1/kv/other":        {404, "not under --prefix"},
		"/v1/configs/routing": {404, "no snapshot"},
	} {
		if code, body := get(t, base+path); code != want.code || !strings.Contains(body, want.body) {
			t.Errorf("GET %s = %d %q; want %d %q", path, code, body, want.code, want.body)
		}
	}
	awaitRegistered(t, records, "agent-1")
	content := `{"upstreams":[{"host":"up1","weight":100}]}`
	createRelease(t, ctx, pawlv1connect.NewReleaseServiceClient(client, srv.URL), "routing", digest, []byte(content))
	await(t, lines, "wrote routing generation 1")
	await(t, lines, "exec done")
	if code, body := get(t, base+"/ready"); code != 200 {
		t.Errorf("GET /ready after the release = %d %q", code, body)
	}
	if code, body := get(t, base+"/v1/configs/routing"); code != 200 || body != content {
		t.Errorf("GET /v1/configs/routing = %d %q", code, body)
	}
}

func TestTemplateAndEndpointUsageErrors(t *testing.T) {
	tmpl := writeTemplate(t, `{{key "/app/a"}}`)
	broken := writeTemplate(t, `{{key "/app/a"`)
	for _, args := range [][]string{
		{"--template", tmpl},                  // no DEST
		{"--template", tmpl + ":../out"},      // outside DIR
		{"--template", tmpl + ":/etc/out"},    // absolute
		{"--template", tmpl + ":kv/a"},        // the keys' directory
		{"--template", tmpl + ":configs/a"},   // the configs' directory
		{"--template", broken + ":out"},       // does not parse
		{"--template", "/nonexistent:out"},    // no such file
		{"--listen", "0.0.0.0:2772"},          // beyond loopback
		{"--listen", "2772"},                  // not HOST:PORT
		{"--listen", "127.0.0.1:0", "--once"}, // nothing to serve
	} {
		args = append([]string{"--dir", "d", "--no-assignments", "--prefix", "/app/"}, args...)
		var stderr strings.Builder
		if code := run(context.Background(), args, io.Discard, &stderr); code != 2 || stderr.Len() == 0 {
			t.Errorf("%q: exit %d, %q", args, code, stderr.String())
		}
	}
	var stderr strings.Builder
	if code := run(context.Background(), []string{"--dir", "d", "--identity", "x", "--once"}, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "--config") {
		t.Errorf("--once following releases without --config: exit %d, %q", code, stderr.String())
	}
}
