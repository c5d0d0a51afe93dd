package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pawlcfg/pawl/internal/testkit/pawldtest"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/internal/testkit/wasmbuild"
	"github.com/pawlcfg/pawl/server"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		wasmbuild.Cleanup()
		pawldtest.Cleanup()
		os.Exit(code)
	}))
}

// pawl runs one command line against srv and returns its exit code and
// output. A call may take two minutes, not the CLI's default 30 s: under
// the race detector on a loaded machine, the server's first compile of a
// several-megabyte validator upload took longer than 30 s. A command line
// that names its own --timeout keeps it.
func pawl(t *testing.T, srv *testserver.Server, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), append([]string{"--server", srv.URL, "--timeout", "2m"}, args...), strings.NewReader(stdin), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func expect(t *testing.T, srv *testserver.Server, want string, args ...string) {
	t.Helper()
	code, out, errOut := pawl(t, srv, "", args...)
	if code != 0 || out != want {
		t.Fatalf("pawl %s = %d, %q (stderr %q); want 0, %q", strings.Join(args, " "), code, out, errOut, want)
	}
}

func TestPutGetDelLs(t *testing.T) {
	srv := testserver.Start(t)
	expect(t, srv, "revision 1\n", "put", "/app/a", "one")
	expect(t, srv, "revision 2\n", "put", "/app/a", "two", "--expect-revision", "1")
	file := filepath.Join(t.TempDir(), "limits.json")
	if err := os.WriteFile(file, []byte(`{"max": 5}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	expect(t, srv, "revision 3\n", "put", "/app/limits.json", "--file", file)
	code, out, _ := pawl(t, srv, "from stdin", "put", "/app/stdin", "-f", "-")
	if code != 0 || out != "revision 4\n" {
		t.Fatalf("put from stdin = %d, %q", code, out)
	}
	expect(t, srv, "two\n", "get", "/app/a")
	expect(t, srv, "one\n", "get", "/app/a", "--revision", "1")
	expect(t, srv, `{"max": 5}`+"\n", "get", "/app/limits.json")
	expect(t, srv, "/app/a\t2\ttwo\n/app/limits.json\t3\t\"{\\\"max\\\": 5}\\n\"\n/app/stdin\t4\tfrom stdin\n", "ls", "/app/", "--page-size", "1")
	expect(t, srv, "revision 5\n", "del", "/app/stdin")

	code, out, _ = pawl(t, srv, "", "get", "/app/a", "-o", "json")
	var got struct {
		KV struct {
			Key, Value, ModRevision string
		}
		Revision string
	}
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || got.KV.Key != "/app/a" || got.KV.ModRevision != "2" || got.Revision != "5" {
		t.Fatalf("get -o json = %d, %q (%v)", code, out, err)
	}
	for _, proto := range []string{"grpc", "grpc-web"} {
		expect(t, srv, "two\n", "get", "/app/a", "--protocol", proto)
	}
}

func TestErrorsExitNonZeroWithTheServersMessage(t *testing.T) {
	srv := testserver.Start(t, server.WithMaxValueBytes(8))
	pawl(t, srv, "", "put", "/k", "v")
	cases := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"put", "nokey", "v"}, 1, `invalid_argument: invalid key: key "nokey" does not start with "/"`},
		{[]string{"put", "/k", "v", "--expect-revision", "9"}, 1, "failed_precondition: compare-and-swap failed"},
		{[]string{"put", "/k", "v", "--expect-revision", "9"}, 1, "\n  key /k: mod revision 1, expected 9\n"},
		{[]string{"put", "/k", "123456789"}, 1, "resource_exhausted: the value is 9 bytes; the limit is 8 bytes"},
		{[]string{"put", "/k", "123456789"}, 1, "\n  limit --max-value-bytes: 8 bytes, the request 9\n"},
		{[]string{"get", "/missing"}, 1, "not_found"},
		{[]string{"get", "/k", "--revision", "7"}, 1, "revision 7 is in the future"},
		{[]string{"del", "/missing"}, 1, "not_found"},
		{[]string{"put", "/k"}, 2, "give a VALUE argument or --file"},
		{[]string{"get"}, 2, "accepts 1 arg"},
		{[]string{"get", "/k", "-o", "yaml"}, 2, `-o "yaml"`},
		{[]string{"get", "/k", "--bogus"}, 2, "unknown flag"},
		{[]string{"get", "/k", "--server", "127.0.0.1:7070"}, 2, `--server "127.0.0.1:7070": want an http:// or https:// URL with a host`},
		{[]string{"get", "/k", "--server", "localhost:7070"}, 2, "want an http:// or https:// URL"},
	}
	for _, c := range cases {
		code, _, errOut := pawl(t, srv, "", c.args...)
		if code != c.code || !strings.Contains(errOut, c.msg) {
			t.Errorf("pawl %v = %d, %q; want %d and %q", c.args, code, errOut, c.code, c.msg)
		}
	}
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"--server", "http://127.0.0.1:1", "get", "/k"}, nil, io.Discard, &stderr); code != 1 || !strings.Contains(stderr.String(), "unavailable") {
		t.Errorf("unreachable server: %d, %q", code, stderr.String())
	}
}

// startWatch runs "pawl watch" until the test ends and returns its output
// lines as they come.
func startWatch(t *testing.T, srv *testserver.Server, args ...string) (lines <-chan string, stop func() int) {
	t.Helper()
	return startWatchAt(t, srv.URL, io.Discard, args...)
}

// startWatchAt is startWatch against the server at url, writing its
// standard error to stderr.
func startWatchAt(t *testing.T, url string, stderr io.Writer, args ...string) (lines <-chan string, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r, w := io.Pipe()
	done := make(chan int, 1)
	go func() {
		code := run(ctx, append([]string{"--server", url, "watch"}, args...), nil, w, stderr)
		w.Close()
		done <- code
	}()
	out := make(chan string, 100)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			out <- sc.Text()
		}
	}()
	var code int
	var stopped bool
	stop = func() int {
		if !stopped {
			stopped = true
			cancel()
			code = <-done
			for range out {
			}
		}
		return code
	}
	t.Cleanup(func() { stop() })
	return out, stop
}

func next(t *testing.T, lines <-chan string) string {
	t.Helper()
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatal("watch ended")
		}
		return l
	case <-time.After(20 * time.Second):
		t.Fatal("no watch output")
	}
	return ""
}

func TestWatchPrintsOneLinePerEvent(t *testing.T) {
	srv := testserver.Start(t)
	lines, stop := startWatch(t, srv, "/app/", "--from-revision", "1")
	expect(t, srv, "revision 1\n", "put", "/app/a", "1")
	expect(t, srv, "revision 2\n", "put", "/other", "x")
	expect(t, srv, "revision 3\n", "put", "/app/b", "two words")
	expect(t, srv, "revision 4\n", "del", "/app/a")
	for _, want := range []string{"PUT /app/a rev=1 1", "PUT /app/b rev=3 two words", "DELETE /app/a rev=4"} {
		if got := next(t, lines); got != want {
			t.Fatalf("watch printed %q, want %q", got, want)
		}
	}
	if code := stop(); code != 0 {
		t.Fatalf("interrupted watch exited %d, want 0", code)
	}
}

func TestWatchJSONStartsThenStreams(t *testing.T) {
	srv := testserver.Start(t)
	lines, _ := startWatch(t, srv, "/", "-o", "json", "--protocol", "grpc")
	if got := next(t, lines); !strings.HasPrefix(got, `{"started":`) {
		t.Fatalf("first line %q, want started", got)
	}
	expect(t, srv, "revision 1\n", "put", "/j", "v")
	var msg struct {
		Events struct {
			Events []struct {
				Type string
				KV   struct{ Key string }
			}
		}
	}
	got := next(t, lines)
	if err := json.Unmarshal([]byte(got), &msg); err != nil || len(msg.Events.Events) != 1 || msg.Events.Events[0].KV.Key != "/j" || msg.Events.Events[0].Type != "PUT" {
		t.Fatalf("event line %q (%v)", got, err)
	}
}

func TestWatchOfCompactedRevisionExitsWithAdvice(t *testing.T) {
	srv := testserver.Start(t, server.WithRetention(2, 0))
	for range 5 {
		pawl(t, srv, "", "put", "/c", "v")
	}
	if _, err := srv.Server.ApplyRetention(context.Background()); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := pawl(t, srv, "", "watch", "/", "--from-revision", "1")
	if code != 1 || !strings.Contains(errOut, "list at revision 5 and watch with --from-revision 6") {
		t.Fatalf("watch of compacted revision = %d, %q", code, errOut)
	}
}

// TestTxn: `pawl txn` applies puts (inline, base64, from files) and
// deletes at once; a failed compare changes nothing and exits 1; a
// malformed file is a usage error.
func TestTxn(t *testing.T) {
	srv := testserver.Start(t)
	expect(t, srv, "revision 1\n", "put", "/deploy/index", "v1")
	expect(t, srv, "revision 2\n", "put", "/deploy/old", "x")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "c.json"), []byte(`{"c":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	ops := filepath.Join(dir, "ops.json")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(ops, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"compares": [{"key": "/deploy/index", "mod_revision": 1}, {"key": "/deploy/new", "mod_revision": 0}],
	        "ops": [{"put": "/deploy/a", "value": "text"}, {"put": "/deploy/b", "value_base64": "AAE="},
	                {"put": "/deploy/c", "value_file": "c.json"}, {"put": "/deploy/index", "value": "v2"},
	                {"delete": "/deploy/old"}, {"delete": "/deploy/never"}]}`)
	expect(t, srv, "revision 7\n", "txn", "--file", ops)
	expect(t, srv, "text\n", "get", "/deploy/a")
	expect(t, srv, `{"c":1}`+"\n", "get", "/deploy/c")
	expect(t, srv, "v2\n", "get", "/deploy/index")
	if code, _, errOut := pawl(t, srv, "", "get", "/deploy/old"); code != 1 || !strings.Contains(errOut, "not_found") {
		t.Fatalf("get of a deleted key = %d, %q", code, errOut)
	}
	// The same file again: the compare on /deploy/index fails.
	code, _, errOut := pawl(t, srv, "", "txn", "--file", ops)
	if code != 1 || !strings.Contains(errOut, "failed_precondition") {
		t.Fatalf("txn with a stale compare = %d, %q", code, errOut)
	}
	expect(t, srv, "revision 8\n", "put", "/deploy/index", "v3", "--expect-revision", "6") // the failed txn changed nothing
	for _, bad := range []string{
		`{"ops": [{"put": "/a", "delete": "/b"}]}`,
		`{"ops": [{"put": "/a"}]}`,
		`{"ops": [{"delete": "/a", "value": "x"}]}`,
		`{"ops": [], "extra": 1}`,
		`{"compares": [{"key": "/a"}], "ops": [{"delete": "/a"}]}`,
	} {
		write(bad)
		if code, _, errOut := pawl(t, srv, "", "txn", "--file", ops); code != 2 {
			t.Errorf("txn of %s = %d (%q); want a usage error", bad, code, errOut)
		}
	}
}
