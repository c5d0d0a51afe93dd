package server_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/url"
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

// certAuthority signs certificates for tests.
type certAuthority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newCA(t *testing.T, name string) *certAuthority {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &certAuthority{cert: cert, key: key}
}

// issue signs a certificate valid from notBefore to notAfter: a server's
// for 127.0.0.1, or a client's with the URI SAN uri (if any).
func (ca *certAuthority) issue(t *testing.T, server bool, cn, uri string, notBefore, notAfter time.Time) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn}, NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	if uri != "" {
		u, err := url.Parse(uri)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = []*url.URL{u}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func writePEM(t *testing.T, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestMutualTLS: a client certificate from the client CA is its URI SAN's
// principal, with the certificates section's grants; one from an unknown
// CA, or expired, fails the handshake; one whose principal the file does
// not name is UNAUTHENTICATED; a bearer token still works over TLS.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, stranger := newCA(t, "clients"), newCA(t, "stranger")
	serverCert := ca.issue(t, true, "pawld", "", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	certFile, keyFile, caFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "ca.pem")
	writePEM(t, certFile, "CERTIFICATE", serverCert.Certificate[0])
	keyDER, err := x509.MarshalECPrivateKey(serverCert.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, keyFile, "EC PRIVATE KEY", keyDER)
	writePEM(t, caFile, "CERTIFICATE", ca.cert.Raw)

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
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
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

	good := ca.issue(t, false, "app-1", spiffe, now.Add(-time.Hour), now.Add(time.Hour))
	if _, err := put(kvWith(&good, ""), "/app/a"); err != nil {
		t.Fatalf("a good certificate: %v", err)
	}
	_, err = put(kvWith(&good, ""), "/other/a")
	wantCode(t, "a good certificate outside its grant", err, connect.CodePermissionDenied, `principal "`+spiffe+`"`)
	subject := ca.issue(t, false, "subject-only", "", now.Add(-time.Hour), now.Add(time.Hour))
	_, err = put(kvWith(&subject, ""), "/app/a")
	wantCode(t, "a subject's reader grant", err, connect.CodePermissionDenied, `principal "CN=subject-only"`)

	unknownCA := stranger.issue(t, false, "app-1", spiffe, now.Add(-time.Hour), now.Add(time.Hour))
	if _, err := put(kvWith(&unknownCA, ""), "/app/a"); err == nil {
		t.Errorf("a certificate of an unknown CA was accepted")
	}
	expired := ca.issue(t, false, "app-1", spiffe, now.Add(-2*time.Hour), now.Add(-time.Hour))
	if _, err := put(kvWith(&expired, ""), "/app/a"); err == nil {
		t.Errorf("an expired certificate was accepted")
	}
	unnamed := ca.issue(t, false, "app-9", "spiffe://test.example/ns/app/sa/app-9", now.Add(-time.Hour), now.Add(time.Hour))
	_, err = put(kvWith(&unnamed, ""), "/app/a")
	wantCode(t, "a certificate the file does not name", err, connect.CodeUnauthenticated, "app-9", "not in the server's auth file")
	_, err = put(kvWith(nil, ""), "/app/a")
	wantCode(t, "no certificate, no token", err, connect.CodeUnauthenticated)
	if _, err := put(kvWith(nil, token), "/other/a"); err != nil {
		t.Errorf("a token over TLS: %v", err)
	}
}
