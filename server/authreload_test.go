package server_test

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/internal/testkit/testtls"
	"github.com/pawlcfg/pawl/server"
)

// TestAuthReloadKeepsLiveStreams: with watch streams open, the auth file
// is replaced and reloaded: the streams keep delivering, the removed
// token is refused from then on, the new one works, and a malformed file
// leaves the one in use in place.
func TestAuthReloadKeepsLiveStreams(t *testing.T) {
	f := newAuthFixture(t)
	reader, admin := f.as("reader"), f.as("admin")
	var streams []*connect.ServerStreamForClient[pawlv1.WatchResponse]
	for range 3 {
		s, err := reader.kv.Watch(f.ctx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: "/app/"}))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if !s.Receive() || s.Msg().GetStarted() == nil {
			t.Fatalf("watch: %v", s.Err())
		}
		streams = append(streams, s)
	}
	// The reader's token goes; a new reader comes.
	if err := os.WriteFile(f.path, []byte(f.authYAML("admin", "reader2:reader")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.srv.Server.ReloadAuth(); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.kv.Put(f.ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "/app/after", Value: []byte("v")})); err != nil {
		t.Fatal(err)
	}
	for i, s := range streams {
		if !s.Receive() || len(s.Msg().GetEvents().GetEvents()) != 1 || s.Msg().GetEvents().GetEvents()[0].GetKv().GetKey() != "/app/after" {
			t.Fatalf("stream %d after the reload: %v %v", i, s.Msg(), s.Err())
		}
	}
	_, err := reader.kv.Get(f.ctx, connect.NewRequest(&pawlv1.GetRequest{Key: "/app/after"}))
	wantCode(t, "the removed token", err, connect.CodeUnauthenticated, "not in the server's auth file")
	if _, err := f.as("reader2").kv.Get(f.ctx, connect.NewRequest(&pawlv1.GetRequest{Key: "/app/after"})); err != nil {
		t.Errorf("the new token: %v", err)
	}
	// A malformed file: the error names the entry, and the file in use stays.
	bad := f.authYAML("admin") + "  - principal: typo\n    hash: sha256:abc\n    grants: [{role: admin}]\n"
	if err := os.WriteFile(f.path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	err = f.srv.Server.ReloadAuth()
	if err == nil || !contains(err.Error(), `tokens[1] (line 6, principal "typo")`, "hash must be sha256:") {
		t.Errorf("reload of a malformed file: %v", err)
	}
	if _, err := f.as("reader2").kv.Get(f.ctx, connect.NewRequest(&pawlv1.GetRequest{Key: "/app/after"})); err != nil {
		t.Errorf("after a failed reload: %v", err)
	}
	// Both reloads, the token change and the refused one, are audited.
	var outcomes []string
	for _, r := range auditRecords(t, f.ctx, f.as("admin").au, 100) {
		if r.Procedure == server.ReloadAuthProcedure && r.Principal == "pawld" {
			outcomes = append(outcomes, r.Outcome)
		}
	}
	if slices.Sort(outcomes); !slices.Equal(outcomes, []string{"invalid_argument", "ok"}) {
		t.Errorf("audited reloads: %v; want one that failed and one that did not", outcomes)
	}
}

func contains(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// TestMutualTLS: a client certificate from the client CA is its URI SAN's
// principal, with the certificates section's grants; one from an unknown
// CA, or expired, fails the handshake; one whose principal the file does
// not name is UNAUTHENTICATED; a bearer token still works over TLS.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, stranger := testtls.NewCA(t, "clients"), testtls.NewCA(t, "stranger")
	issue := func(ca *testtls.CA, cn, uri string, notBefore, notAfter time.Time) tls.Certificate {
		return ca.Issue(t, testtls.Leaf{CommonName: cn, URI: uri, NotBefore: notBefore, NotAfter: notAfter})
	}
	serverCert := ca.Issue(t, testtls.Leaf{CommonName: "pawld", Server: true, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)})
	certFile, keyFile := testtls.WriteKeyPair(t, dir, "server", serverCert)
	caFile := filepath.Join(dir, "ca.pem")
	ca.WriteCA(t, caFile)

	token, hash := testserver.NewToken(t)
	const spiffe = "spiffe://test.example/ns/app/sa/app-1"
	authFile := testserver.WriteAuthFile(t, fmt.Sprintf(`tokens:
  - principal: ops
    hash: %s
    grants: [{role: admin}]
certificates:
  - principal: %s
    grants:
      - role: writer
        prefixes: ["/app/"]
  - principal: CN=subject-only
    grants:
      - role: reader
        prefixes: ["/app/"]
`, hash, spiffe))
	srv := testserver.Start(t, server.WithTLS(certFile, keyFile), server.WithTLSClientCA(caFile), server.WithAuthFile(authFile))
	roots := ca.Pool()
	base := "https://" + srv.Addr
	kvWith := func(cert *tls.Certificate, token string) pawlv1connect.KVServiceClient {
		cfg := &tls.Config{RootCAs: roots}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}
		t.Cleanup(tr.CloseIdleConnections)
		client := &http.Client{Transport: tr}
		if token != "" {
			client = testserver.WithBearer(client, token)
		}
		return pawlv1connect.NewKVServiceClient(client, base, connect.WithGRPC())
	}
	now := time.Now()
	put := func(kv pawlv1connect.KVServiceClient, key string) (*pawlv1.PutResponse, error) {
		resp, err := kv.Put(t.Context(), connect.NewRequest(&pawlv1.PutRequest{Key: key, Value: []byte("v")}))
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	}

	good := issue(ca, "app-1", spiffe, now.Add(-time.Hour), now.Add(time.Hour))
	if _, err := put(kvWith(&good, ""), "/app/a"); err != nil {
		t.Fatalf("a good certificate: %v", err)
	}
	_, err := put(kvWith(&good, ""), "/other/a")
	wantCode(t, "a good certificate outside its grant", err, connect.CodePermissionDenied, `principal "`+spiffe+`"`)
	subject := issue(ca, "subject-only", "", now.Add(-time.Hour), now.Add(time.Hour))
	_, err = put(kvWith(&subject, ""), "/app/a")
	wantCode(t, "a subject's reader grant", err, connect.CodePermissionDenied, `principal "CN=subject-only"`)

	unknownCA := issue(stranger, "app-1", spiffe, now.Add(-time.Hour), now.Add(time.Hour))
	if _, err := put(kvWith(&unknownCA, ""), "/app/a"); err == nil {
		t.Errorf("a certificate of an unknown CA was accepted")
	}
	expired := issue(ca, "app-1", spiffe, now.Add(-2*time.Hour), now.Add(-time.Hour))
	if _, err := put(kvWith(&expired, ""), "/app/a"); err == nil {
		t.Errorf("an expired certificate was accepted")
	}
	unnamed := issue(ca, "app-9", "spiffe://test.example/ns/app/sa/app-9", now.Add(-time.Hour), now.Add(time.Hour))
	_, err = put(kvWith(&unnamed, ""), "/app/a")
	wantCode(t, "a certificate the file does not name", err, connect.CodeUnauthenticated, "app-9", "not in the server's auth file")
	_, err = put(kvWith(nil, ""), "/app/a")
	wantCode(t, "no certificate, no token", err, connect.CodeUnauthenticated)
	if _, err := put(kvWith(nil, token), "/other/a"); err != nil {
		t.Errorf("a token over TLS: %v", err)
	}
}
