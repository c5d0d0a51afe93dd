package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
)

// seesExec is an --exec that prints every mirrored value under dir, in
// key order, on one line after "exec sees".
func seesExec(dir string) string {
	return fmt.Sprintf(`printf 'exec sees %%s\n' "$(cat %s/kv/* 2>/dev/null | tr -d '\n')"`, filepath.Clean(dir))
}

// nextExec reads lines until --exec's next one and returns what it saw.
func nextExec(t *testing.T, lines <-chan string) string {
	t.Helper()
	return strings.TrimSpace(strings.TrimPrefix(await(t, lines, "exec sees"), "exec sees"))
}

// kvClient is a KV client of srv, and a put that fails the test.
func kvClient(t *testing.T, srv *testserver.Server) (pawlv1connect.KVServiceClient, func(key, value string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	kv := pawlv1connect.NewKVServiceClient(testserver.HTTPClient(t), srv.URL)
	return kv, func(key, value string) {
		t.Helper()
		if _, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: key, Value: []byte(value)})); err != nil {
			t.Fatal(err)
		}
	}
}

// TestATransactionRunsExecOnce: a transaction of four keys is written as a
// whole, then --exec runs once and sees all four files; the next change
// runs it once more.
func TestATransactionRunsExecOnce(t *testing.T) {
	srv := testserver.Start(t)
	kv, put := kvClient(t, srv)
	dir := t.TempDir()
	lines := runAgent(t, "--server", srv.URL, "--no-assignments", "--prefix", "/t/", "--dir", dir, "--exec", seesExec(dir))
	if got := nextExec(t, lines); got != "" {
		t.Fatalf("the run at start saw %q, want nothing", got)
	}
	var ops []*pawlv1.TxnOp
	for i, k := range []string{"a", "b", "c", "d"} {
		ops = append(ops, &pawlv1.TxnOp{Key: "/t/" + k, Value: fmt.Appendf(nil, "%d", i+1)})
	}
	if _, err := kv.Txn(context.Background(), connect.NewRequest(&pawlv1.TxnRequest{Ops: ops})); err != nil {
		t.Fatal(err)
	}
	if got := nextExec(t, lines); got != "1234" {
		t.Fatalf("the first run after a 4-key transaction saw %q, want all four: 1234", got)
	}
	put("/t/e", "5")
	if got := nextExec(t, lines); got != "12345" {
		t.Fatalf("the run after the next put saw %q, want 12345 (one run per batch)", got)
	}
}

// TestExecRunsOnceAtStart: three keys already stored give one run of
// --exec after the initial sync, which sees all three.
func TestExecRunsOnceAtStart(t *testing.T) {
	srv := testserver.Start(t)
	_, put := kvClient(t, srv)
	for i, k := range []string{"a", "b", "c"} {
		put("/t/"+k, fmt.Sprint(i+1))
	}
	dir := t.TempDir()
	lines := runAgent(t, "--server", srv.URL, "--no-assignments", "--prefix", "/t/", "--dir", dir, "--exec", seesExec(dir))
	if got := nextExec(t, lines); got != "123" {
		t.Fatalf("the first run saw %q, want the initial sync whole: 123", got)
	}
	put("/t/d", "4")
	if got := nextExec(t, lines); got != "1234" {
		t.Fatalf("the run after the next put saw %q, want 1234 (one run at start)", got)
	}
}

// TestWaitCoalescesABurst: with --wait, three separate puts in quick
// succession give one run of --exec, which sees all three.
func TestWaitCoalescesABurst(t *testing.T) {
	srv := testserver.Start(t)
	_, put := kvClient(t, srv)
	dir := t.TempDir()
	// MIN is generous: the three puts, over loopback, each come well
	// within it of the one before, even on loaded cores.
	lines := runAgent(t, "--server", srv.URL, "--no-assignments", "--prefix", "/t/", "--dir", dir, "--exec", seesExec(dir), "--wait", "3s,1m")
	if got := nextExec(t, lines); got != "" {
		t.Fatalf("the run at start saw %q, want nothing", got)
	}
	for i, k := range []string{"a", "b", "c"} {
		put("/t/"+k, fmt.Sprint(i+1))
	}
	if got := nextExec(t, lines); got != "123" {
		t.Fatalf("the first run after a burst of three puts saw %q, want them all: 123", got)
	}
}

func TestWaitUsageErrors(t *testing.T) {
	for _, v := range []string{"x", "-1s", "2s,1s", "1s,y"} {
		var stderr strings.Builder
		args := []string{"--dir", "d", "--no-assignments", "--prefix", "/t/", "--wait", v}
		if code := run(context.Background(), args, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "-wait") || !strings.Contains(stderr.String(), "MIN") {
			t.Errorf("--wait %q: exit %d, %q", v, code, stderr.String())
		}
	}
	var w waitFlag
	if err := w.Set("2s"); err != nil || w.min != 2*time.Second || w.max != 8*time.Second {
		t.Errorf("--wait 2s = %v, %v", w, err)
	}
}
