package sdk_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pawlcfg/pawl/internal/testkit/testtls"
	"github.com/pawlcfg/pawl/sdk"
	"github.com/pawlcfg/pawl/sdk/credentials"
)

// nonLoopbackListener listens on an address of this machine beyond
// loopback, or returns nil when it has none.
func nonLoopbackListener(t *testing.T) net.Listener {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		ipnet, ok := a.(*net.IPNet)
		if !ok || ipnet.IP.IsLoopback() || ipnet.IP.To4() == nil {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(ipnet.IP.String(), "0"))
		if err != nil {
			continue
		}
		t.Cleanup(func() { _ = ln.Close() })
		return ln
	}
	return nil
}

// TestNewRefusesATokenInClearTextBeyondLoopback: given a token, by value
// or in a file, New fails for an http:// server beyond loopback, alone or
// anywhere in a list, with an error naming it, and connects to nothing (a
// listener on this machine's own non-loopback address sees our own
// connection first); to loopback, over https, or with no token, it
// starts.
func TestNewRefusesATokenInClearTextBeyondLoopback(t *testing.T) {
	ctx := context.Background()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("pawl_secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	refused := []string{"http://example.com:7070", "http://10.1.2.3:7070", "http://localhost.example.com:7070", "http://127.0.0.1.nip.io:7070"}
	ln := nonLoopbackListener(t)
	if ln != nil {
		refused = append(refused, "http://"+ln.Addr().String())
	} else {
		t.Log("this machine has no non-loopback IPv4 address: the no-connection check is left out")
	}
	tokens := map[string]sdk.Option{"token": sdk.WithAuthToken("pawl_secret"), "token file": sdk.WithAuthTokenFile(tokenFile)}
	for name, token := range tokens {
		for _, url := range refused {
			for _, list := range []string{url, "http://127.0.0.1:7070," + url} {
				_, err := sdk.New(ctx, list, sdk.WithoutAssignments(), token, sdk.WithLogger(quiet()))
				if !errors.Is(err, credentials.ErrClearText) || !strings.Contains(err.Error(), url) {
					t.Errorf("%s, %s: New = %v, want a refusal naming %s", name, list, err, url)
				}
			}
		}
		for _, url := range []string{"http://127.0.0.1:1", "http://127.9.8.7:1", "http://localhost:1", "http://LOCALHOST:1", "http://[::1]:1", "https://example.com:7070"} {
			c, err := sdk.New(ctx, url, sdk.WithoutAssignments(), token, sdk.WithLogger(quiet()))
			if err != nil {
				t.Errorf("%s, %s: %v", name, url, err)
				continue
			}
			_ = c.Close()
		}
	}
	c, err := sdk.New(ctx, "http://10.1.2.3:7070", sdk.WithoutAssignments(), sdk.WithLogger(quiet()))
	if err != nil {
		t.Errorf("no token, http://10.1.2.3:7070: %v", err)
	} else {
		_ = c.Close()
	}
	if ln == nil {
		return
	}
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("!")); err != nil {
		t.Fatal(err)
	}
	first, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	var b [1]byte
	if _, err := first.Read(b[:]); err != nil || b[0] != '!' {
		t.Fatalf("the first connection to %s was not the test's own (it began %q, %v): something connected before", ln.Addr(), b[:], err)
	}
}

// TestATokenReachesPawldOnLoopback: over clear text to loopback, the token
// goes with every call, the session's and a space's.
func TestATokenReachesPawldOnLoopback(t *testing.T) {
	skipUnderAuth(t)
	h := newHarness(t)
	rec := testtls.Record(h.srv.Server.Handler())
	url := testtls.ServeClear(t, rec)
	c := h.clientAt(url, "tok-1", sdk.WithAuthToken("pawl_loopback"))
	if _, err := c.Space(h.ctx, "/flags/"); err != nil {
		t.Fatal(err)
	}
	waitRequest(t, h.ctx, rec, "Session", "Bearer pawl_loopback", "")
	for _, r := range requests(rec) {
		if r.Authorization != "Bearer pawl_loopback" {
			t.Errorf("%s came with Authorization %q", r.Path, r.Authorization)
		}
	}
}

// TestATokenFileCAAndClientCertificateReachPawld: behind a listener that
// requires a client certificate from its CA, a client given the CA, the
// certificate and a token file reaches pawld, presenting the certificate
// and the token on every call; the token file replaced (as a mounted
// secret is) sends the new token from the next call on, with no restart.
// Without the CA, or without the certificate, no call gets through.
func TestATokenFileCAAndClientCertificateReachPawld(t *testing.T) {
	skipUnderAuth(t)
	h := newHarness(t)
	pki := testtls.New(t)
	rec := testtls.Record(h.srv.Server.Handler())
	url := pki.Serve(t, rec)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	write := func(token string) {
		tmp := filepath.Join(dir, "token.new")
		if err := os.WriteFile(tmp, []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, tokenFile); err != nil {
			t.Fatal(err)
		}
	}
	write("pawl_first")
	c := h.clientAt(url, "mtls-1", sdk.WithAuthTokenFile(tokenFile), sdk.WithCAFile(pki.CA), sdk.WithClientCertificate(pki.ClientCert, pki.ClientKey))
	waitRequest(t, h.ctx, rec, "Session", "Bearer pawl_first", testtls.ClientID)
	if _, err := c.Space(h.ctx, "/a/"); err != nil {
		t.Fatal(err)
	}
	write("pawl_second")
	if _, err := c.Space(h.ctx, "/b/"); err != nil {
		t.Fatal(err)
	}
	if !seen(rec, "List", "Bearer pawl_second", testtls.ClientID) {
		t.Errorf("after the token file was replaced, no List came with the new token and the client certificate: %+v", requests(rec))
	}

	// Without the CA the client refuses the server's certificate; without
	// a certificate of its own the server refuses the client (with TLS
	// 1.3 the client may learn it only as a connection that broke).
	for name, opts := range map[string][]sdk.Option{
		"no CA":                 {sdk.WithClientCertificate(pki.ClientCert, pki.ClientKey)},
		"no client certificate": {sdk.WithCAFile(pki.CA)},
	} {
		c := h.clientAt(url, "", append(opts, sdk.WithoutAssignments(), sdk.WithAuthTokenFile(tokenFile))...)
		_, err := c.Space(h.ctx, "/a/")
		if err == nil || name == "no CA" && !strings.Contains(err.Error(), "certificate signed by unknown authority") {
			t.Errorf("%s: starting a space: %v", name, err)
		}
	}
	for _, r := range requests(rec) {
		if r.ClientID != testtls.ClientID {
			t.Errorf("%s was served without the client certificate", r.Path)
		}
	}
}

// seen reports whether rec saw a call to a procedure ending in procedure
// with this Authorization header and client certificate.
func seen(rec *testtls.Recorder, procedure, authorization, clientID string) bool {
	for _, r := range requests(rec) {
		if strings.HasSuffix(r.Path, "/"+procedure) && r.Authorization == authorization && r.ClientID == clientID {
			return true
		}
	}
	return false
}

func requests(rec *testtls.Recorder) []testtls.Request {
	r, _ := rec.Requests()
	return r
}

// waitRequest waits until rec saw a call to a procedure ending in
// procedure with this Authorization header and client certificate, or
// fails the test after 30 seconds.
func waitRequest(t *testing.T, ctx context.Context, rec *testtls.Recorder, procedure, authorization, clientID string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		_, next := rec.Requests()
		if seen(rec, procedure, authorization, clientID) {
			return
		}
		select {
		case <-next:
		case <-ctx.Done():
			t.Fatalf("no %s call with Authorization %q and client %q; calls: %+v", procedure, authorization, clientID, requests(rec))
		}
	}
}

// skipUnderAuth skips a test that gives its clients credentials of its
// own, or starts servers of its own, when the harness runs with
// authentication on (PAWL_TEST_AUTH=1).
func skipUnderAuth(t *testing.T) {
	if os.Getenv("PAWL_TEST_AUTH") == "1" {
		t.Skip("gives its clients credentials of its own; the harness's are for the other tests")
	}
}
