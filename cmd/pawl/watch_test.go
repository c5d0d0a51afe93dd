package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/internal/testkit/pawldtest"
)

// lockedBuffer is a bytes.Buffer that a command writes from its goroutine
// while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// putAt runs pawl put against the server at url.
func putAt(t *testing.T, url, key, value string) {
	t.Helper()
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"--server", url, "put", key, value}, nil, io.Discard, &stderr); code != 0 {
		t.Fatalf("put %s = %d, %q", key, code, stderr.String())
	}
}

// TestWatchResumesAcrossAServerRestart kills a real pawld under a running
// `pawl watch`, starts it again on the same data directory and port, and
// sees the watch reconnect and print the change made after the restart,
// from the revision after the last one it printed.
func TestWatchResumesAcrossAServerRestart(t *testing.T) {
	dir := t.TempDir()
	first := pawldtest.Start(t, "--data", dir)
	var stderr lockedBuffer
	lines, stop := startWatchAt(t, first.URL, &stderr, "/w/", "--from-revision", "1") // from 1: no race with the first put
	putAt(t, first.URL, "/w/a", "1")
	if got := next(t, lines); got != "PUT /w/a rev=1 1" {
		t.Fatalf("watch printed %q", got)
	}
	first.Kill()
	second := pawldtest.Start(t, "--data", dir, "--listen", first.Addr)
	putAt(t, second.URL, "/w/b", "2")
	if got := next(t, lines); got != "PUT /w/b rev=2 2" {
		t.Fatalf("after the restart, watch printed %q (stderr %q)", got, stderr.String())
	}
	if code := stop(); code != 0 {
		t.Fatalf("interrupted watch exited %d", code)
	}
	if !strings.Contains(stderr.String(), "reconnecting from revision 2") {
		t.Fatalf("stderr %q does not say where the watch resumes", stderr.String())
	}
}

// TestWatchNoRetrySaysWhereToResume: with --no-retry, a server that dies
// ends the watch with exit 1 and the --from-revision to resume from.
func TestWatchNoRetrySaysWhereToResume(t *testing.T) {
	p := pawldtest.Start(t, "--data", t.TempDir())
	var stderr lockedBuffer
	lines, stop := startWatchAt(t, p.URL, &stderr, "/w/", "--from-revision", "1", "--no-retry")
	putAt(t, p.URL, "/w/a", "1")
	putAt(t, p.URL, "/w/b", "2")
	for range 2 {
		next(t, lines)
	}
	p.Kill()
	for range lines { // the watch ends by itself
	}
	if code := stop(); code != 1 || !strings.Contains(stderr.String(), "resume with --from-revision 3") {
		t.Fatalf("watch --no-retry after a kill = %d, %q", code, stderr.String())
	}
}

// TestKeysArePrintedQuotedAsValuesAre: a key with a control character (the
// server refuses new ones; a store written before that rule may hold
// some) is quoted in ls and watch output, so each stays on its line and
// in its column.
func TestKeysArePrintedQuotedAsValuesAre(t *testing.T) {
	var out bytes.Buffer
	g := &globals{stdout: &out, output: "text"}
	kv := &pawlv1.KeyValue{Key: "/a\nforged\t1\tline", Value: []byte("v"), ModRevision: 1}
	if err := g.printList(&pawlv1.ListResponse{Kvs: []*pawlv1.KeyValue{kv}}); err != nil {
		t.Fatal(err)
	}
	if err := printWatchText(&out, &pawlv1.WatchResponse{Kind: &pawlv1.WatchResponse_Events{Events: &pawlv1.WatchEvents{Events: []*pawlv1.Event{
		{Type: pawlv1.EventType_EVENT_TYPE_PUT, Kv: kv},
		{Type: pawlv1.EventType_EVENT_TYPE_DELETE, Kv: kv},
	}}}}, false); err != nil {
		t.Fatal(err)
	}
	want := "\"/a\\nforged\\t1\\tline\"\t1\tv\n" +
		"PUT \"/a\\nforged\\t1\\tline\" rev=1 v\n" +
		"DELETE \"/a\\nforged\\t1\\tline\" rev=1\n"
	if out.String() != want {
		t.Fatalf("printed %q, want %q", out.String(), want)
	}
}

// TestVersionAndCompletion: --version names the build and completion
// prints a script, neither calling a server (a bad --server is fine).
func TestVersionAndCompletion(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--version"}, "pawl "},
		{[]string{"completion", "bash"}, "bash completion"},
		{[]string{"completion", "zsh"}, "#compdef pawl"},
		{[]string{"completion", "fish"}, "complete -c pawl"},
	} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), append([]string{"--server", "not-a-url"}, c.args...), nil, &out, &errOut)
		if code != 0 || !strings.HasPrefix(out.String(), c.want) && !strings.Contains(out.String(), c.want) {
			t.Errorf("pawl %v = %d, %q, %q", c.args, code, out.String(), errOut.String())
		}
	}
}
