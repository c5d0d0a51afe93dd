package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
)

// lineWriter sends each complete line written to it on lines.
type lineWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines chan string
}

func newLineWriter() *lineWriter { return &lineWriter{lines: make(chan string, 1000)} }

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		line, err := w.buf.ReadString('\n')
		if err != nil {
			w.buf.WriteString(line) // partial: keep it for the next write
			return len(p), nil
		}
		w.lines <- strings.TrimSuffix(line, "\n")
	}
}

// background is a pawl command line running in its own goroutine.
type background struct {
	stdout, stderr *lineWriter
	done           chan int
}

// startPawl runs a command line against srv in the background; the test's
// cleanup interrupts it and waits for it.
func startPawl(t *testing.T, srv *testserver.Server, args ...string) *background {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b := &background{stdout: newLineWriter(), stderr: newLineWriter(), done: make(chan int, 1)}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		b.done <- run(ctx, append([]string{"--server", srv.URL}, args...), nil, b.stdout, b.stderr)
	}()
	t.Cleanup(func() { cancel(); <-ended })
	return b
}

// awaitLine returns the first line on lines that contains want.
func awaitLine(t *testing.T, lines <-chan string, want string) string {
	t.Helper()
	deadline := time.After(60 * time.Second)
	var seen []string
	for {
		select {
		case l := <-lines:
			if strings.Contains(l, want) {
				return l
			}
			seen = append(seen, l)
		case <-deadline:
			t.Fatalf("no line with %q; saw %q", want, seen)
		}
	}
}

// exitCode waits for the command to end.
func (b *background) exitCode(t *testing.T) int {
	t.Helper()
	select {
	case code := <-b.done:
		return code
	case <-time.After(60 * time.Second):
		t.Fatal("the command did not end")
	}
	return 0
}

// TestPromoteWaitAndRolloutWatch: promote --wait says what it waits on
// and promotes once the stage passes; rollout status --watch prints a
// line per change of stage progress and ends when every stage passed;
// both end with exit 1 on a stopped rollout; a long command says what it
// is doing on stderr.
func TestPromoteWaitAndRolloutWatch(t *testing.T) {
	srv := testserver.Start(t)
	is := pawlv1connect.NewInstanceServiceClient(testserver.HTTPClient(t), srv.URL)
	epochs, digest, f := registerAndUpload(t, srv, is, "pay-a", "pay-b")
	create := func() {
		t.Helper()
		code, _, errOut := pawl(t, srv, "", "--progress-after", "0", "release", "create", "routing", "--file", f, "--validator", digest,
			"--health-window", "0s", "--stage", "all:all")
		if code != 0 || !strings.Contains(errOut, "pawl: creating release of routing") || !strings.Contains(errOut, ": done in ") {
			t.Fatalf("release create = %d, %q", code, errOut)
		}
	}
	ack := func(gen int64, id string) {
		t.Helper()
		sendAck(t, srv, gen, id, epochs[id], digest, pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED)
	}

	create()
	promote := startPawl(t, srv, "promote", "routing", "1", "--wait", "--interval", "20ms", "--key", "w1", "--actor", "ci")
	awaitLine(t, promote.stderr.lines, "pawl: waiting to promote routing generation 1: stage all is waiting, 0/2 healthy")
	ack(1, "pay-a")
	awaitLine(t, promote.stderr.lines, "stage all is waiting, 1/2 healthy")
	ack(1, "pay-b")
	if code := promote.exitCode(t); code != 0 {
		t.Fatalf("promote --wait = %d", code)
	}
	if got := awaitLine(t, promote.stdout.lines, "promoted"); got != "routing promoted: generation 0 -> 1, epoch 0, receipt w1 by ci" {
		t.Fatalf("promote --wait printed %q", got)
	}

	create()
	watch := startPawl(t, srv, "rollout", "status", "routing", "--watch", "--interval", "20ms")
	if got := awaitLine(t, watch.stdout.lines, "routing generation 2"); !strings.HasPrefix(got, "routing generation 2 CANDIDATE: all waiting 0/2 (") {
		t.Fatalf("first line of --watch: %q", got)
	}
	ack(2, "pay-a")
	awaitLine(t, watch.stdout.lines, "routing generation 2 CANDIDATE: all waiting 1/2 (")
	ack(2, "pay-b")
	if code := watch.exitCode(t); code != 0 {
		t.Fatalf("rollout status --watch = %d", code)
	}
	awaitLine(t, watch.stdout.lines, "routing generation 2 CANDIDATE: all passed 2/2")
	// -o json names each state one way: as the text and the state counts do.
	code, out, _ := pawl(t, srv, "", "rollout", "status", "routing", "--generation", "2", "-o", "json", "--acks")
	if code != 0 || !strings.Contains(out, `"state":"CANDIDATE"`) || !strings.Contains(out, `"state":"HEALTHY_ACKED"`) ||
		!strings.Contains(out, `"HEALTHY_ACKED":2`) || strings.Contains(out, "_STATE_") || strings.Contains(out, `"kind":"ACK_POLICY_KIND_`) {
		t.Fatalf("rollout status -o json = %d, %q", code, out)
	}

	create()
	if code, _, errOut := pawl(t, srv, "", "rollout", "stop", "routing", "3", "--reason", "p99 up"); code != 0 {
		t.Fatalf("stop = %d, %q", code, errOut)
	}
	for _, args := range [][]string{{"promote", "routing", "3", "--wait"}, {"rollout", "status", "routing", "--watch"}} {
		if code, _, errOut := pawl(t, srv, "", args...); code != 1 || !strings.Contains(errOut, "routing generation 3 is STOPPED: p99 up; it can no longer be promoted") {
			t.Errorf("%v on a stopped rollout = %d, %q", args, code, errOut)
		}
	}
	if code, _, errOut := pawl(t, srv, "", "rollout", "status", "routing", "--watch", "-o", "json"); code != 2 {
		t.Errorf("--watch -o json = %d, %q; want a usage error", code, errOut)
	}
}

// TestReleaseWithASelectorThatMatchesNothingIsRefused: a selector that no
// registered instance matches would make a release that can only fail at
// promote: create refuses it, naming the selector, and stores nothing.
func TestReleaseWithASelectorThatMatchesNothingIsRefused(t *testing.T) {
	srv := testserver.Start(t)
	is := pawlv1connect.NewInstanceServiceClient(testserver.HTTPClient(t), srv.URL)
	_, digest, f := registerAndUpload(t, srv, is, "pay-a")
	code, _, errOut := pawl(t, srv, "", "release", "create", "routing", "--file", f, "--validator", digest, "--stage", "all:all", "--selector", "env=prod,team=pay")
	if code != 1 || !strings.Contains(errOut, "failed_precondition: release: the selector matches no registered instance: selector {env=prod,team=pay}") {
		t.Fatalf("release create with a selector that matches nothing = %d, %q", code, errOut)
	}
	expect(t, srv, "", "release", "ls", "routing")
	// Without the selector, the same release is created.
	if code, _, errOut := pawl(t, srv, "", "release", "create", "routing", "--file", f, "--validator", digest, "--stage", "all:all"); code != 0 {
		t.Fatalf("release create = %d, %q", code, errOut)
	}
}
