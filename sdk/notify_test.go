package sdk_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pawlcfg/pawl/internal/testkit/goroutines"
	"github.com/pawlcfg/pawl/sdk"
)

// within receives from ch, failing the test if nothing comes in a minute
// (a generous bound: what it guards against is a deadlock).
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("%s: nothing within a minute (a deadlock?)", what)
		var zero T
		return zero
	}
}

// closedWithin drains ch until it is closed, failing the test if it is
// not closed within a minute; it returns what it drained.
func closedWithin(t *testing.T, ch <-chan *sdk.Snapshot, what string) []*sdk.Snapshot {
	t.Helper()
	var got []*sdk.Snapshot
	deadline := time.After(time.Minute)
	for {
		select {
		case s, ok := <-ch:
			if !ok {
				return got
			}
			got = append(got, s)
		case <-deadline:
			t.Fatalf("%s: not closed within a minute", what)
		}
	}
}

// TestCallbacksMayStopThemselvesReadTheClientAndCloseIt: an OnChange
// callback that stops itself (twice), one that reads the client (Config,
// Pin, Status) and one that closes the client all return; the client
// keeps applying after the first, and Close from a callback closes the
// client's channels.
func TestCallbacksMayStopThemselvesReadTheClientAndCloseIt(t *testing.T) {
	h := newHarness(t)
	c := h.client("i0")
	h.waitRegistered("i0")

	var stopSelf atomic.Pointer[func()]
	var selfCalls atomic.Int32
	stoppedSelf := make(chan struct{}, 1)
	stop := c.OnChange("routing", func(*sdk.Snapshot) {
		selfCalls.Add(1)
		(*stopSelf.Load())()
		(*stopSelf.Load())() // idempotent
		stoppedSelf <- struct{}{}
	})
	stopSelf.Store(&stop)
	read := make(chan int64, 8)
	c.OnChange("", func(s *sdk.Snapshot) {
		pinned := sdk.Pinned(c.Pin(context.Background()), "routing")
		if c.Config("routing") == nil || pinned == nil || len(c.Status().Configs) == 0 {
			t.Errorf("a callback of %s read no snapshot", s)
		}
		read <- s.Generation
	})

	h.release(50, nil)
	within(t, stoppedSelf, "the callback that stops itself")
	if g := within(t, read, "the callback that reads the client"); g != 1 {
		t.Fatalf("the reading callback saw generation %d first", g)
	}
	h.release(60, nil)
	has(t, c, 2)
	if g := within(t, read, "the callback that reads the client"); g != 2 {
		t.Fatalf("the reading callback saw generation %d second", g)
	}
	if n := selfCalls.Load(); n != 1 {
		t.Fatalf("the callback that stopped itself was called %d times", n)
	}
	stop() // once more, from outside: still a no-op

	changes, _ := c.Changes("routing")
	closed := make(chan error, 1)
	c.OnChange("routing", func(s *sdk.Snapshot) {
		if s.Generation == 3 {
			closed <- c.Close()
		}
	})
	h.release(70, nil)
	if err := within(t, closed, "Close called from a callback"); err != nil {
		t.Fatal(err)
	}
	closedWithin(t, changes, "Changes after Close")
	if err := c.Close(); err != nil {
		t.Fatalf("Close again: %v", err)
	}
}

// TestWatchAndChangesCloseOnContextStopAndClose: Watch sends the current
// snapshot first and then each newer one, and its channel closes when its
// context ends or the client closes; Changes' channel closes when it is
// stopped; a range over either ends; no goroutine of theirs outlives
// Close.
func TestWatchAndChangesCloseOnContextStopAndClose(t *testing.T) {
	h := newHarness(t)
	c := h.client("i0")
	h.waitRegistered("i0")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	early := c.Watch(ctx, "routing")
	changes, stopChanges := c.Changes("routing")

	h.release(50, nil)
	if s := within(t, early, "Watch"); s.Generation != 1 {
		t.Fatalf("Watch sent %s", s)
	}
	if s := within(t, changes, "Changes"); s.Generation != 1 {
		t.Fatalf("Changes sent %s", s)
	}
	late := c.Watch(context.Background(), "routing")
	if s := within(t, late, "a Watch started after the apply"); s.Generation != 1 {
		t.Fatalf("a Watch started after the apply sent %s first", s)
	}

	cancel()
	closedWithin(t, early, "Watch after its context ended")
	stopChanges()
	stopChanges()
	closedWithin(t, changes, "Changes after stop")

	ranged := make(chan int, 1)
	go func() {
		n := 0
		for range late {
			n++
		}
		ranged <- n
	}()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	within(t, ranged, "a range over Watch after Close")
	if s, ok := <-c.Watch(context.Background(), "routing"); ok {
		t.Fatalf("Watch on a closed client sent %s", s)
	}

	// Close waited for the goroutines of the watches and of the
	// callbacks: none is left.
	for _, fn := range []string{"sdk.(*Client).watchChannel", "sdk.(*notifier).run"} {
		if goroutines.Count(fn) > 0 {
			t.Fatalf("a goroutine in %s outlived Close:\n%s", fn, strings.Join(goroutines.Stacks(), "\n\n"))
		}
	}
}
