package api

import (
	"runtime"
	"sync"
	"testing"
)

// TestWaitWaitsForEverySessionPastItsHello: Wait returns only once every
// session that entered (past its hello) left, and a session that comes
// after Wait began is refused. The HTTP server's shutdown does not wait
// for h2c streams, so without it a session's handler could take an ACK
// while the server closes the audit log.
func TestWaitWaitsForEverySessionPastItsHello(t *testing.T) {
	h := &Sessions{}
	h.ended = sync.NewCond(&h.mu)
	if !h.enter() || !h.enter() {
		t.Fatal("a session was refused before Wait")
	}
	waited := make(chan struct{})
	go func() {
		h.Wait()
		close(waited)
	}()
	// Wait has begun once it set closing: a session now is refused.
	for {
		h.mu.Lock()
		closing := h.closing
		h.mu.Unlock()
		if closing {
			break
		}
		select {
		case <-waited:
			t.Fatal("Wait returned while two sessions were running")
		default:
			runtime.Gosched() // Wait sets closing first: nothing to await
		}
	}
	if h.enter() {
		t.Fatal("a session entered after Wait began")
	}
	h.leave()
	select {
	case <-waited:
		t.Fatal("Wait returned while a session was running")
	default:
	}
	h.leave()
	<-waited
}
