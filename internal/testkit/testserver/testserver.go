// Package testserver starts a real Pawl server on a loopback port for tests
// and stops it when the test ends, as connect-go's memhttptest does.
//
// With PAWL_TEST_STORE=redis in the environment, every server it starts
// keeps its data in the shared test Redis (internal/redistest) instead of
// the embedded store, under a prefix of its own per data directory (a
// restart on the same directory finds the same data): the suites above
// the store run unchanged on either engine.
package testserver

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/pawlcfg/pawl/internal/testkit/redistest"
	"github.com/pawlcfg/pawl/internal/testkit/wasmbuild"
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
	// RedisPrefix is the prefix of its store in the shared test Redis,
	// with PAWL_TEST_STORE=redis ("" on the embedded store).
	RedisPrefix string

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
	// The validator limit is wall-clock time: on two cores shared by every
	// test package under -race, a 400 kB document has taken longer than
	// the 1 s default. The tests of the limit itself set their own.
	base := []server.Option{server.WithDataDir(dir), server.WithLogger(quiet), server.WithValidatorCacheDir(wasmbuild.CacheDir(t)),
		server.WithValidatorTimeout(TestValidatorTimeout), server.WithValidatorCompileTimeout(wasmbuild.CompileTimeout)}
	prefix := ""
	if os.Getenv("PAWL_TEST_STORE") == "redis" {
		var opts []server.Option
		opts, prefix = redisStore(t, dir)
		base = append(base, opts...)
	}
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
	s := &Server{URL: "http://" + ln.Addr().String(), Addr: ln.Addr().String(), DataDir: dir, Server: srv, RedisPrefix: prefix}
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

// TestValidatorTimeout is the validator limit of the servers Start runs:
// wasmbuild's, for tests that need their validations to succeed.
const TestValidatorTimeout = wasmbuild.ValidatorTimeout

// Engine names the store engine the servers of this test run use:
// "redis" or "bolt".
func Engine() string {
	if os.Getenv("PAWL_TEST_STORE") == "redis" {
		return "redis"
	}
	return "bolt"
}

var (
	prefixMu sync.Mutex
	prefixes = map[string]string{} // by data directory
)

// redisStore returns the options of a server keeping its data in the
// shared test Redis under the prefix of dir, deleted when the test that
// first used dir ends, and the prefix.
func redisStore(t testing.TB, dir string) ([]server.Option, string) {
	prefixMu.Lock()
	prefix, ok := prefixes[dir]
	if !ok {
		prefix = redistest.Prefix()
		prefixes[dir] = prefix
	}
	prefixMu.Unlock()
	if !ok {
		rdb, _ := redistest.Shared(t) // its own prefix goes unused
		t.Cleanup(func() { redistest.DeletePrefix(t, rdb, prefix) })
	}
	return []server.Option{server.WithStore("redis://" + redistest.Addr() + "/0"), server.WithRedisPrefix(prefix)}, prefix
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

// NewToken returns a new bearer token in Pawl's format ("pawl_" and the
// base64url of 32 random bytes) and the hash an auth file stores for it.
func NewToken(t testing.TB) (token, hash string) {
	t.Helper()
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	token = "pawl_" + base64.RawURLEncoding.EncodeToString(b[:])
	sum := sha256.Sum256([]byte(token))
	return token, "sha256:" + hex.EncodeToString(sum[:])
}

// WriteAuthFile writes an auth file (YAML) in a temporary directory and
// returns its path, for server.WithAuthFile.
func WriteAuthFile(t testing.TB, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "auth.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// BearerClient is HTTPClient sending token as a bearer token on every
// request.
func BearerClient(t testing.TB, token string) *http.Client {
	return WithBearer(HTTPClient(t), token)
}

// WithBearer returns a copy of client that sends token as a bearer token
// on every request.
func WithBearer(client *http.Client, token string) *http.Client {
	next := client.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	return &http.Client{Transport: bearer{token: token, next: next}}
}

type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}
