// Package faultproxy puts network faults between a test's clients and a
// real server: a TCP proxy that holds everything the server sends, or
// everything clients send, until released (a delayed stream), or cuts
// every connection and refuses new ones until healed (a partition), at
// once or once a number of bytes went through (a cut in the middle of a
// transfer); an HTTP proxy that loses the answers to chosen calls after
// the server handled them (a lost response); and a man in the middle
// that rewrites messages (Rewriter).
package faultproxy

import (
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// Holder is a TCP proxy whose two directions can be held: while held,
// what the server sends (Hold), or what clients send (HoldRequests), is
// read and kept, in order, and delivered when released, or dropped with
// the connections by a Partition.
type Holder struct {
	// Addr is the address clients dial instead of the server's.
	Addr string

	ln     net.Listener
	target string
	mu     sync.Mutex
	// down is what the server sends; up, what clients send.
	down, up valve
	conns    []net.Conn
	wg       sync.WaitGroup
	// partitioned refuses connections.
	partitioned bool
	// cutAt, when positive, partitions once cutSeen (bytes sent to clients
	// since CutAfter) passes it, and closes cut.
	cutAt, cutSeen int64
	cut            chan struct{}
}

// NewHolder proxies to target until the test ends.
func NewHolder(t testing.TB, target string) *Holder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("faultproxy: listen: %v", err)
	}
	h := &Holder{Addr: ln.Addr().String(), ln: ln, target: target, down: newValve(), up: newValve()}
	h.wg.Add(1)
	go h.accept()
	t.Cleanup(h.close)
	return h
}

// valve holds one direction of the proxy's traffic. The Holder's mu
// guards it.
type valve struct {
	held bool
	gate chan struct{} // closed while not held: a chunk read waits on the gate of its time
	kept int           // bytes read since the hold began
}

func newValve() valve {
	v := valve{gate: make(chan struct{})}
	close(v.gate)
	return v
}

func (v *valve) hold() {
	if !v.held {
		v.held, v.gate, v.kept = true, make(chan struct{}), 0
	}
}

// read notes n bytes read and returns the gate they wait on.
func (v *valve) read(n int) chan struct{} {
	if v.held {
		v.kept += n
	}
	return v.gate
}

func (v *valve) release() int {
	if v.held {
		v.held = false
		close(v.gate)
	}
	return v.kept
}

// Hold starts holding what the server sends.
func (h *Holder) Hold() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.down.hold()
}

// Release delivers what was held and stops holding; it returns how many
// bytes were held.
func (h *Holder) Release() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.down.release()
}

// HoldRequests starts holding what clients send.
func (h *Holder) HoldRequests() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.up.hold()
}

// HeldRequests is how many bytes clients sent since HoldRequests, while
// held (0 once released).
func (h *Holder) HeldRequests() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.up.held {
		return 0
	}
	return h.up.kept
}

// ReleaseRequests delivers what clients sent while held (what a
// Partition cut off goes nowhere) and stops holding; it returns how many
// bytes were held.
func (h *Holder) ReleaseRequests() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.up.release()
}

// Partition closes every connection, dropping what is in flight, and
// refuses new ones until Heal.
func (h *Holder) Partition() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.partitionLocked()
}

func (h *Holder) partitionLocked() {
	h.partitioned = true
	for _, c := range h.conns {
		_ = c.Close()
	}
	h.conns = nil
}

// Heal accepts connections again after a partition.
func (h *Holder) Heal() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.partitioned = false
}

// CutAfter partitions the proxy once more than n bytes went from the
// server to clients from now on, in the middle of whatever transfer
// crosses the mark; the channel is closed when it happened.
func (h *Holder) CutAfter(n int64) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cutAt, h.cutSeen, h.cut = n, 0, make(chan struct{})
	return h.cut
}

func (h *Holder) accept() {
	defer h.wg.Done()
	for {
		client, err := h.ln.Accept()
		if err != nil {
			return
		}
		h.mu.Lock()
		down := h.partitioned
		h.mu.Unlock()
		if down {
			_ = client.Close()
			continue
		}
		server, err := net.Dial("tcp", h.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		h.mu.Lock()
		if h.partitioned {
			// Partitioned while this connection was being set up: it
			// must not slip through.
			h.mu.Unlock()
			_ = client.Close()
			_ = server.Close()
			continue
		}
		h.conns = append(h.conns, client, server)
		h.mu.Unlock()
		h.wg.Add(2)
		go func() {
			defer h.wg.Done()
			h.toServer(server, client)
			_ = server.Close()
		}()
		go func() {
			defer h.wg.Done()
			h.toClient(client, server)
			_ = client.Close()
		}()
	}
}

// toClient copies server to client, waiting at the gate before each write.
func (h *Holder) toClient(client, server net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			h.mu.Lock()
			gate := h.down.read(n)
			if h.cutAt > 0 {
				if h.cutSeen += int64(n); h.cutSeen > h.cutAt {
					h.cutAt = 0
					h.partitionLocked()
					close(h.cut)
					h.mu.Unlock()
					return
				}
			}
			h.mu.Unlock()
			<-gate
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// toServer copies client to server. It reads all the client sends, also
// while held (so that HeldRequests counts every byte sent, however the
// client's writes fell into reads), and a second goroutine writes each
// chunk, in order, once past the gate that was in force when it was read.
func (h *Holder) toServer(server, client net.Conn) {
	type chunk struct {
		data []byte
		gate chan struct{}
	}
	chunks := make(chan chunk, 4096)
	written := make(chan struct{})
	go func() {
		defer close(written)
		for c := range chunks {
			<-c.gate
			if _, err := server.Write(c.data); err != nil {
				for range chunks { // the connection is gone: drop the rest
				}
				return
			}
		}
	}()
	defer func() {
		close(chunks)
		<-written
	}()
	for {
		buf := make([]byte, 32<<10)
		n, err := client.Read(buf)
		if n > 0 {
			h.mu.Lock()
			gate := h.up.read(n)
			h.mu.Unlock()
			chunks <- chunk{data: buf[:n], gate: gate}
		}
		if err != nil {
			return
		}
	}
}

func (h *Holder) close() {
	_ = h.ln.Close()
	// The connections first: what is held when the test ends goes
	// nowhere.
	h.mu.Lock()
	for _, c := range h.conns {
		_ = c.Close()
	}
	h.mu.Unlock()
	h.Release()
	h.ReleaseRequests()
	h.wg.Wait()
}

// Loser is an HTTP reverse proxy that passes every call to the server and,
// for the next calls whose path ends with a suffix it was told to lose,
// throws the server's answer away and answers 502: the call happened, the
// caller cannot tell.
type Loser struct {
	// URL is the address clients use instead of the server's.
	URL string

	mu   sync.Mutex
	lose map[string]int // path suffix -> answers still to lose
	lost map[string]int // path suffix -> answers lost
}

// NewLoser proxies to the server at target (http://host:port) until the
// test ends. It speaks HTTP/1.1 to clients and to the server, so clients
// use the Connect protocol through it.
func NewLoser(t testing.TB, target string) *Loser {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatalf("faultproxy: %v", err)
	}
	l := &Loser{lose: map[string]int{}, lost: map[string]int{}}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.ErrorLog = log.New(io.Discard, "", 0)
	proxy.ModifyResponse = func(resp *http.Response) error {
		l.mu.Lock()
		defer l.mu.Unlock()
		for suffix, n := range l.lose {
			if n > 0 && strings.HasSuffix(resp.Request.URL.Path, suffix) {
				l.lose[suffix]--
				l.lost[suffix]++
				return errors.New("faultproxy: the answer is lost")
			}
		}
		return nil
	}
	front := httptest.NewServer(proxy)
	t.Cleanup(front.Close)
	l.URL = front.URL
	return l
}

// LoseNext makes the next n answers to calls whose path ends with suffix
// get lost.
func (l *Loser) LoseNext(suffix string, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lose[suffix] += n
}

// Lost says how many answers to calls ending with suffix were lost.
func (l *Loser) Lost(suffix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost[suffix]
}
