package goroutines_test

import (
	"context"
	"runtime"
	"testing"
	"time"

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

// parkedInOtherSelect is parkedInSelect under another name.
//
//go:noinline
func parkedInOtherSelect(stop <-chan struct{}, other chan int) {
	select {
	case <-stop:
	case <-other:
	}
}

// parkedInReceive waits in a channel receive until stop is closed.
//
//go:noinline
func parkedInReceive(stop <-chan struct{}) { <-stop }

const (
	selectFn      = "github.com/pawlcfg/pawl/internal/testkit/goroutines_test.parkedInSelect("
	otherSelectFn = "github.com/pawlcfg/pawl/internal/testkit/goroutines_test.parkedInOtherSelect("
	receiveFn     = "github.com/pawlcfg/pawl/internal/testkit/goroutines_test.parkedInReceive("
	selectName    = "goroutines_test.parkedInSelect("
)

// TestCountAndWaitingSeeParkedGoroutines: goroutines parked in a select
// and in a receive of their own functions are counted by those functions
// and seen waiting there, together and each in its own state only; once
// they ended, neither.
func TestCountAndWaitingSeeParkedGoroutines(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stop, done := make(chan struct{}), make(chan struct{}, 3)
	go func() { parkedInSelect(stop, make(chan int)); done <- struct{}{} }()
	go func() { parkedInOtherSelect(stop, make(chan int)); done <- struct{}{} }()
	go func() { parkedInReceive(stop); done <- struct{}{} }()
	for !goroutines.Waiting("select", selectFn, otherSelectFn) || !goroutines.Waiting("chan receive", receiveFn) {
		select {
		case <-ctx.Done():
			t.Fatal("the goroutines were not seen waiting")
		default:
			runtime.Gosched() // not parked yet: let them run
		}
	}
	if n := goroutines.Count(selectName, "no such function("); n != 1 {
		t.Fatalf("Count = %d, want 1", n)
	}
	if goroutines.Waiting("chan receive", selectFn) || goroutines.Waiting("select", receiveFn) {
		t.Fatal("a goroutine seen waiting in the other's state")
	}
	if goroutines.Waiting("select", selectFn, receiveFn) {
		t.Fatal("Waiting of two functions when one waits in another state")
	}
	close(stop)
	for range 3 {
		<-done
	}
	if n := goroutines.Count(selectName); n != 0 {
		t.Fatalf("Count after it ended = %d", n)
	}
	if goroutines.Waiting("select", selectFn) {
		t.Fatal("seen waiting after it ended")
	}
}
