package sdk_test

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/pawlcfg/pawl/internal/testkit/pawldtest"
	"github.com/pawlcfg/pawl/sdk"
)

// logLine is one record a client logged, its attributes as text.
type logLine struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

// logCapture is a slog handler that keeps every record (every level) and
// lets a test await one.
type logCapture struct {
	mu      sync.Mutex
	lines   []logLine
	changed chan struct{}
}

func newLogCapture() *logCapture { return &logCapture{changed: make(chan struct{})} }

func (l *logCapture) Enabled(context.Context, slog.Level) bool { return true }
func (l *logCapture) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logCapture) WithGroup(string) slog.Handler            { return l }
func (l *logCapture) Handle(_ context.Context, r slog.Record) error {
	line := logLine{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool {
		line.attrs[a.Key] = a.Value.String()
		return true
	})
	l.mu.Lock()
	l.lines = append(l.lines, line)
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
	return nil
}

// await waits until cond holds for the lines logged so far, checking
// after each new one, and returns them.
func (l *logCapture) await(t *testing.T, what string, cond func([]logLine) bool) []logLine {
	t.Helper()
	deadline := time.After(2 * time.Minute)
	for {
		l.mu.Lock()
		lines, changed := append([]logLine(nil), l.lines...), l.changed
		l.mu.Unlock()
		if cond(lines) {
			return lines
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("waiting for %s; logged:\n%v", what, lines)
		}
	}
}

func count(lines []logLine, level slog.Level, msgPrefix string) int {
	n := 0
	for _, l := range lines {
		if l.level == level && strings.HasPrefix(l.msg, msgPrefix) {
			n++
		}
	}
	return n
}

// TestAKilledServerIsUnavailableAndLoggedOnce: when the pawld process a
// client follows is killed, the client's stream ends with Unavailable
// (not "internal: protocol error: incomplete envelope"), in the log and
// in Status; its retries while pawld is down are logged at debug level
// only, after one warning; and the recovery, once pawld is back at the
// same address, is logged once with the count of failures.
func TestAKilledServerIsUnavailableAndLoggedOnce(t *testing.T) {
	data := t.TempDir()
	p := pawldtest.Start(t, "--data", data)
	logs := newLogCapture()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := sdk.New(ctx, p.URL, sdk.WithWorkloadIdentity("i0"), sdk.WithZone("zone-a"),
		sdk.WithBackoff(10*time.Millisecond, 100*time.Millisecond), sdk.WithLogger(slog.New(logs)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}()
	logs.await(t, "the client to connect", func(l []logLine) bool { return count(l, slog.LevelDebug, "pawl: connected") == 1 })
	if st := c.Status(); !st.Registered || !st.Connected || st.LastError != nil || st.Server != p.URL {
		t.Fatalf("Status while connected = %+v", st)
	}

	p.Kill()
	const retries = 15
	lines := logs.await(t, "retries", func(l []logLine) bool { return count(l, slog.LevelDebug, "pawl: retrying") >= retries })
	if n := count(lines, slog.LevelWarn, ""); n != 1 {
		t.Fatalf("%d warnings over %d retries: want one for the outage; logged:\n%v", n, retries, lines)
	}
	for _, l := range lines {
		if l.level == slog.LevelWarn {
			if e := l.attrs["error"]; !strings.HasPrefix(e, "unavailable: ") || strings.Contains(e, "protocol error") {
				t.Fatalf("the outage was logged with %q: want unavailable", e)
			}
		}
	}
	st := c.Status()
	if !st.Registered || st.Connected || st.Failures < retries || connect.CodeOf(st.LastError) != connect.CodeUnavailable || st.LastErrorAt.IsZero() {
		t.Fatalf("Status while pawld is down = %+v", st)
	}
	var first logLine
	for _, l := range lines {
		if l.level == slog.LevelWarn {
			first = l
		}
	}
	if !strings.Contains(first.attrs["call"], "the session") || !strings.Contains(first.attrs["error"], sdk.ErrConnectionLost.Error()) {
		t.Fatalf("the first failure was logged as %v: want the session's lost connection", first)
	}

	pawldtest.Start(t, "--data", data, "--listen", p.Addr)
	lines = logs.await(t, "the recovery", func(l []logLine) bool { return count(l, slog.LevelInfo, "pawl: the server is reachable again") == 1 })
	for _, l := range lines {
		if n, _ := strconv.Atoi(l.attrs["failures"]); l.msg == "pawl: the server is reachable again" && n < retries {
			t.Fatalf("the recovery was logged as %v: want at least %d failures counted", l, retries)
		}
	}
	if st := c.Status(); !st.Connected || st.Failures != 0 || connect.CodeOf(st.LastError) != connect.CodeUnavailable {
		t.Fatalf("Status after the recovery = %+v", st)
	}
}
