package server_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pawlcfg/pawl/internal/testkit/faultproxy"
	"github.com/pawlcfg/pawl/internal/testkit/redistest"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/server"
)

// get GETs path on srv with client and returns the status and body.
func get(t testing.TB, client *http.Client, srv *testserver.Server, path string, header ...string) (int, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limitBound)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// awaitStatus GETs path until it answers want, for at most limitBound.
func awaitStatus(t *testing.T, srv *testserver.Server, path string, want int) string {
	t.Helper()
	client := testserver.HTTPClient(t)
	bound := time.Now().Add(limitBound)
	for {
		code, body, err := get(t, client, srv, path)
		if err == nil && code == want {
			return body
		}
		if time.Now().After(bound) {
			t.Fatalf("GET %s: %d %q, %v; want %d within %s", path, code, body, err, want, limitBound)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReadyzFollowsTheStore: /readyz answers 200 while the Redis store
// is reachable, 503 with the reason once a partition cuts the server off
// from it, and 200 again once it heals; /healthz answers 200 throughout,
// since the process is alive.
func TestReadyzFollowsTheStore(t *testing.T) {
	_, prefix := redistest.Shared(t)
	proxy := faultproxy.NewHolder(t, redistest.Addr())
	srv := testserver.Start(t, server.WithStore("redis://"+proxy.Addr+"/0"), server.WithRedisPrefix(prefix))
	client := testserver.HTTPClient(t)
	if code, body, err := get(t, client, srv, server.ReadyzPath); err != nil || code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/readyz with Redis reachable: %d %q, %v", code, body, err)
	}

	proxy.Partition()
	body := awaitStatus(t, srv, server.ReadyzPath, http.StatusServiceUnavailable)
	if !strings.HasPrefix(body, "not ready: the store") {
		t.Errorf("/readyz cut off from Redis says %q; want the reason", body)
	}
	if code, _, err := get(t, client, srv, server.HealthzPath); err != nil || code != http.StatusOK {
		t.Errorf("/healthz cut off from Redis: %d, %v; want 200 (the process is alive)", code, err)
	}

	proxy.Heal()
	awaitStatus(t, srv, server.ReadyzPath, http.StatusOK)
}

// TestOpsEndpointsRespectConnectionLimits: /metrics, /healthz and /readyz
// are served on the API's port, behind its connection limits: an address
// at its limit is refused a connection for a scrape as for a call, the
// refusal is counted by its limit, and the admin network still scrapes.
func TestOpsEndpointsRespectConnectionLimits(t *testing.T) {
	srv := testserver.Start(t, server.WithConnLimits(4, 1, 1), server.WithAdminNetworks(netip.MustParsePrefix("127.0.0.1/32")),
		server.WithTimeouts(time.Minute, time.Minute, time.Minute))
	// One connection from 127.0.0.2, held open: the address's limit.
	held, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).Dial("tcp", srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if _, err := io.WriteString(held, "GET /healthz HTTP/1.1\r\nHost: pawl\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(held), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz on the held connection: %v, %v", resp, err)
	}
	resp.Body.Close()

	for _, path := range []string{server.MetricsPath, server.HealthzPath, server.ReadyzPath} {
		if code, _, err := get(t, fromAddr(t, "127.0.0.2", true, nil), srv, path); err == nil {
			t.Errorf("GET %s on a second connection from an address at its limit answered %d", path, code)
		} else if !refusedConnection(err) {
			t.Errorf("GET %s over the limit: %v; want the connection closed by the server", path, err)
		}
	}
	awaitConns(t, srv, func(st server.ConnStats) bool { return st.Refused >= 3 })
	after := scrapeMetrics(t, srv)
	if got := after[series("pawl_limit_refusals_total", "limit=max-conns-per-address")]; got != 3 {
		t.Errorf("refusals by max-conns-per-address = %v, want 3", got)
	}
	if code, _, err := get(t, fromAddr(t, "127.0.0.3", true, nil), srv, server.ReadyzPath); err != nil || code != http.StatusOK {
		t.Errorf("/readyz from another address: %d, %v", code, err)
	}
}

// refusedConnection reports whether err is what a client sees when the
// server closes a connection it refused: reset or ended while it read, or
// a broken pipe when the close came before the request was written.
func refusedConnection(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
}

// TestMetricsAuth: with --metrics-auth, /metrics answers 401 without a
// credential of the auth file (or with a wrong one) and 200 with any
// principal's token, however few its grants; /healthz and /readyz stay
// open. Without it, /metrics is open even with an auth file, as etcd's
// and Consul's are.
func TestMetricsAuth(t *testing.T) {
	tok, hash := testserver.NewToken(t)
	path := testserver.WriteAuthFile(t, "tokens:\n  - principal: prometheus\n    hash: "+hash+"\n    grants:\n      - role: reader\n        prefixes: [\"/nothing/\"]\n")
	guarded := testserver.Start(t, server.WithAuthFile(path), server.WithMetricsAuth())
	open := testserver.Start(t, server.WithAuthFile(path))
	client := testserver.HTTPClient(t)

	for _, c := range []struct {
		srv    *testserver.Server
		path   string
		header []string
		want   int
	}{
		{guarded, server.MetricsPath, nil, http.StatusUnauthorized},
		{guarded, server.MetricsPath, []string{"Authorization", "Bearer pawl_not-a-token"}, http.StatusUnauthorized},
		{guarded, server.MetricsPath, []string{"Authorization", "Basic eDp5"}, http.StatusUnauthorized},
		{guarded, server.MetricsPath, []string{"Authorization", "Bearer " + tok}, http.StatusOK},
		{guarded, server.HealthzPath, nil, http.StatusOK},
		{guarded, server.ReadyzPath, nil, http.StatusOK},
		{open, server.MetricsPath, nil, http.StatusOK},
	} {
		code, body, err := get(t, client, c.srv, c.path, c.header...)
		if err != nil || code != c.want {
			t.Errorf("GET %s (%v) = %d %q, %v; want %d", c.path, c.header, code, body, err, c.want)
		}
		if c.want == http.StatusUnauthorized && !strings.Contains(body, "--metrics-auth") {
			t.Errorf("GET %s (%v) refused with %q; want the reason and the flag", c.path, c.header, body)
		}
		if c.want == http.StatusOK && c.path == server.MetricsPath && !strings.Contains(body, "pawl_store_revision ") {
			t.Errorf("GET %s: no series", c.path)
		}
	}
	if _, err := server.New(context.Background(), server.WithDataDir(t.TempDir()), server.WithMetricsAuth()); err == nil ||
		!strings.Contains(err.Error(), "WithAuthFile") {
		t.Errorf("WithMetricsAuth without an auth file: %v; want an error naming WithAuthFile", err)
	}
}
