package goroutines_test

import (
	"runtime"
	"testing"

	"github.com/pawlcfg/pawl/internal/testkit/goroutines"
)

// parkedInSelect waits in a select until stop is closed.
//
//go:noinline
func parkedInSelect(stop <-chan struct{}, other chan int) {
	select {
	case <-stop:
	case <-other:
	}
}

// TestCountAndWaitingSeeAParkedGoroutine: a goroutine parked in a select
// of its own function is counted by that function and seen waiting there
// (and not in another state); once it ended, neither.
func TestCountAndWaitingSeeAParkedGoroutine(t *testing.T) {
	const fn = "goroutines_test.parkedInSelect("
	const innermost = "github.com/pawlcfg/pawl/internal/testkit/goroutines_test.parkedInSelect("
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		parkedInSelect(stop, make(chan int))
	}()
	for !goroutines.Waiting("select", innermost) {
		select {
		case <-done:
			t.Fatal("the goroutine ended before it was seen waiting")
		default:
			runtime.Gosched() // not parked yet: let it run
		}
	}
	if n := goroutines.Count(fn, "no such function("); n != 1 {
		t.Fatalf("Count = %d, want 1", n)
	}
	if goroutines.Waiting("chan receive", innermost) {
		t.Fatal("seen waiting in a chan receive; it waits in a select")
	}
	close(stop)
	<-done
	if n := goroutines.Count(fn); n != 0 {
		t.Fatalf("Count after it ended = %d", n)
	}
	if goroutines.Waiting("select", innermost) {
		t.Fatal("seen waiting after it ended")
	}
}
