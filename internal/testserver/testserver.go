// Package testserver starts a real Pawl server on a loopback port for tests
// and stops it when the test ends, as connect-go's memhttptest does.
package testserver

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"

	"github.com/pawlcfg/pawl/internal/wasmbuild"
	"github.com/pawlcfg/pawl/server"
)

// Server is a running test server.
type Server struct {
	// URL is the base URL, http://127.0.0.1:PORT.
	URL string
	// Addr is the listening address.
	Addr string
	// DataDir is the data directory of the embedded store.
	DataDir string
	// Server is the server itself, for its counters.
	Server *server.Server

	stop func()
}

// Start runs a server with opts on a free loopback port, in a new temporary
// data directory unless opts set one. The test's cleanup stops it
// gracefully and fails the test if the stop was not clean.
func Start(t testing.TB, opts ...server.Option) *Server {
	t.Helper()
	dir := t.TempDir()
	return StartIn(t, dir, opts...)
}

// StartIn is Start on the data directory dir, for restart tests.
func StartIn(t testing.TB, dir string, opts ...server.Option) *Server {
	t.Helper()
	return StartAt(t, dir, "127.0.0.1:0", opts...)
}

// StartAt is StartIn listening on addr, for a restart that clients must
// find at the same address.
func StartAt(t testing.TB, dir, addr string, opts ...server.Option) *Server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	base := []server.Option{server.WithDataDir(dir), server.WithLogger(quiet), server.WithValidatorCacheDir(wasmbuild.CacheDir(t))}
	srv, err := server.New(ctx, append(base, opts...)...)
	if err != nil {
		cancel()
		t.Fatalf("testserver: %v", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		cancel()
		_ = srv.Close()
		t.Fatalf("testserver: listen: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	s := &Server{URL: "http://" + ln.Addr().String(), Addr: ln.Addr().String(), DataDir: dir, Server: srv}
	var stopped bool
	s.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("testserver: serve: %v", err)
		}
		if err := srv.Close(); err != nil {
			t.Errorf("testserver: close: %v", err)
		}
	}
	t.Cleanup(s.stop)
	return s
}

// Stop stops the server now (Cleanup then does nothing), for restart tests.
func (s *Server) Stop() { s.stop() }

// HTTPClient returns a client that speaks HTTP/2 without TLS (prior
// knowledge), which gRPC needs, and closes its connections at cleanup.
func HTTPClient(t testing.TB) *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// HTTP1Client returns a client limited to HTTP/1.1, for Connect over
// HTTP/1.1.
func HTTP1Client(t testing.TB) *http.Client {
	var p http.Protocols
	p.SetHTTP1(true)
	tr := &http.Transport{Protocols: &p}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}
