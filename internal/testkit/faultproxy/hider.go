package faultproxy

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Hider is an HTTP reverse proxy that plays an older server: calls under
// the path prefixes it hides (a service, "/pawl.v1.SessionService/") are
// answered 404, as by a server that does not have them, which Connect and
// gRPC clients read as Unimplemented; every other call goes through. It
// counts the calls to each path, hidden or not. It speaks HTTP/1.1 and h2c
// to clients and h2c to the server, so that bidirectional streams go
// through it.
type Hider struct {
	// URL is the address clients use instead of the server's.
	URL string

	mu       sync.Mutex
	calls    map[string]int // path -> calls
	prefixes []string       // hidden, until Reveal
}

// NewHider proxies to the server at target (http://host:port) until the
// test ends, hiding the paths under each of prefixes.
func NewHider(t testing.TB, target string, prefixes ...string) *Hider {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatalf("faultproxy: %v", err)
	}
	h := &Hider{calls: map[string]int{}, prefixes: prefixes}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.ErrorLog = log.New(io.Discard, "", 0)
	proxy.FlushInterval = -1
	proxy.Transport = h2cTransport()
	h.URL = startFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.calls[r.URL.Path]++
		hidden := slices.ContainsFunc(h.prefixes, func(p string) bool { return strings.HasPrefix(r.URL.Path, p) })
		h.mu.Unlock()
		if hidden {
			http.NotFound(w, r)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	return h
}

// Reveal stops hiding (the server behind was upgraded) and returns how
// many calls whose path ends with suffix reached the proxy until then:
// those counted later were served.
func (h *Hider) Reveal(suffix string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.prefixes = nil
	return h.callsLocked(suffix)
}

// Calls returns how many calls reached the proxy whose path ends with
// suffix (a procedure: "/pawl.v1.RolloutService/Ack").
func (h *Hider) Calls(suffix string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.callsLocked(suffix)
}

// callsLocked is Calls; the caller holds mu.
func (h *Hider) callsLocked(suffix string) int {
	n := 0
	for path, c := range h.calls {
		if strings.HasSuffix(path, suffix) {
			n += c
		}
	}
	return n
}

// startFront serves handler to clients over HTTP/1.1 and h2c (HTTP/2
// with prior knowledge, as the SDK's default client) until the test
// ends, and returns its URL.
func startFront(t testing.TB, handler http.Handler) string {
	front := httptest.NewUnstartedServer(handler)
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	front.Config.Protocols = &p
	front.Start()
	t.Cleanup(front.Close)
	return front.URL
}

// h2cTransport speaks HTTP/2 with prior knowledge to the server, as the
// SDK does: a bidirectional stream needs HTTP/2 end to end.
func h2cTransport() *http.Transport {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Transport{Protocols: &p}
}
