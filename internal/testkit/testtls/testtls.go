// Package testtls is a throwaway PKI for tests of clients' credentials: a
// CA, a server certificate for loopback, and a client certificate, as PEM
// files; Serve runs a handler (the real server's, in Pawl's tests) behind
// a loopback listener that requires and verifies a client certificate,
// and a Recorder records the credentials every request came with.
package testtls

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// ClientID is the SPIFFE ID (URI SAN) of the client certificate.
const ClientID = "spiffe://test.pawl/ns/test/sa/client"

// PKI is a CA with a server and a client certificate, each written as PEM
// files in a temporary directory.
type PKI struct {
	// CA is the CA certificate file.
	CA string
	// ServerCert and ServerKey are valid for 127.0.0.1, ::1 and localhost.
	ServerCert, ServerKey string
	// ClientCert and ClientKey carry ClientID as their URI SAN.
	ClientCert, ClientKey string

	pool   *x509.CertPool
	server tls.Certificate
}

// New makes a PKI in a new temporary directory of t.
func New(t testing.TB) *PKI {
	t.Helper()
	dir := t.TempDir()
	ca := NewCA(t, "pawl test CA")
	p := &PKI{CA: filepath.Join(dir, "ca.pem"), pool: ca.Pool()}
	ca.WriteCA(t, p.CA)
	now := time.Now()
	server := ca.Issue(t, Leaf{CommonName: "server", Server: true, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour)})
	p.ServerCert, p.ServerKey = WriteKeyPair(t, dir, "server", server)
	client := ca.Issue(t, Leaf{CommonName: "client", URI: ClientID, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour)})
	p.ClientCert, p.ClientKey = WriteKeyPair(t, dir, "client", client)
	p.server = server
	return p
}

// RootCAs is a pool that trusts the PKI's CA: a client's RootCAs.
func (p *PKI) RootCAs() *x509.CertPool { return p.pool }

// CA is a certificate authority that issues certificates on demand: for
// tests that need certificates of their own (several CAs, expired ones,
// chosen names).
type CA struct {
	// Cert is the CA's certificate.
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewCA makes a CA named name, valid from an hour ago for a day.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, key: key}
}

// Pool is a pool that trusts the CA.
func (ca *CA) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return pool
}

// Leaf says what certificate to issue.
type Leaf struct {
	// CommonName is its subject's common name.
	CommonName string
	// URI is its URI SAN ("": none).
	URI string
	// Server makes it a server's certificate for 127.0.0.1, ::1 and
	// localhost; otherwise it is a client's.
	Server bool
	// NotBefore and NotAfter bound its validity.
	NotBefore, NotAfter time.Time
}

// Issue signs a certificate for leaf with a new key.
func (ca *CA) Issue(t testing.TB, leaf Leaf) tls.Certificate {
	t.Helper()
	key := newKey(t)
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: leaf.CommonName},
		NotBefore: leaf.NotBefore, NotAfter: leaf.NotAfter, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if leaf.Server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses, tmpl.DNSNames = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, []string{"localhost"}
	}
	if leaf.URI != "" {
		u, err := url.Parse(leaf.URI)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = []*url.URL{u}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// WriteKeyPair writes cert's certificate and EC key as PEM files NAME.pem
// and NAME-key.pem in dir, and returns their paths.
func WriteKeyPair(t testing.TB, dir, name string, cert tls.Certificate) (certFile, keyFile string) {
	t.Helper()
	keyDER, err := x509.MarshalECPrivateKey(cert.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", cert.Certificate[0])
	writePEM(t, keyFile, "EC PRIVATE KEY", keyDER)
	return certFile, keyFile
}

// WriteCA writes the CA's certificate as a PEM file at path.
func (ca *CA) WriteCA(t testing.TB, path string) {
	t.Helper()
	writePEM(t, path, "CERTIFICATE", ca.Cert.Raw)
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func writePEM(t testing.TB, path, kind string, der []byte) {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Request is what a request came with.
type Request struct {
	// Path is the request's path: the procedure, for an RPC.
	Path string
	// Authorization is its Authorization header.
	Authorization string
	// ClientID is the URI SAN of the client certificate it was sent with.
	ClientID string
}

// Recorder is a handler that records what each request came with and
// passes it on.
type Recorder struct {
	next http.Handler

	mu       sync.Mutex
	requests []Request
	arrived  chan struct{} // closed, and replaced, at each request
}

// Record returns a Recorder in front of h.
func Record(h http.Handler) *Recorder { return &Recorder{next: h, arrived: make(chan struct{})} }

// ServeHTTP implements http.Handler.
func (rec *Recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req := Request{Path: r.URL.Path, Authorization: r.Header.Get("Authorization")}
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 && len(r.TLS.PeerCertificates[0].URIs) > 0 {
		req.ClientID = r.TLS.PeerCertificates[0].URIs[0].String()
	}
	rec.mu.Lock()
	rec.requests = append(rec.requests, req)
	close(rec.arrived)
	rec.arrived = make(chan struct{})
	rec.mu.Unlock()
	rec.next.ServeHTTP(w, r)
}

// Requests returns the requests served so far, oldest first, and a
// channel closed at the next one.
func (rec *Recorder) Requests() ([]Request, <-chan struct{}) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]Request(nil), rec.requests...), rec.arrived
}

// Serve runs h behind a listener on 127.0.0.1 that speaks HTTP/2 and
// HTTP/1.1 over TLS with the PKI's server certificate, and requires a
// client certificate the PKI's CA signed, and returns its URL
// (https://127.0.0.1:PORT). It stops at the end of the test (call it after
// starting the clients that use it, so that they close first).
func (p *PKI) Serve(t testing.TB, h http.Handler) string {
	t.Helper()
	ts := httptest.NewUnstartedServer(h)
	ts.EnableHTTP2 = true
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes tests cause on purpose
	ts.TLS = &tls.Config{Certificates: []tls.Certificate{p.server}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: p.pool}
	ts.StartTLS()
	t.Cleanup(ts.Close)
	return ts.URL
}

// ServeClear runs h without TLS on 127.0.0.1, speaking HTTP/1.1 and HTTP/2
// with prior knowledge, and returns its URL (http://127.0.0.1:PORT).
func ServeClear(t testing.TB, h http.Handler) string {
	t.Helper()
	ts := httptest.NewUnstartedServer(h)
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	ts.Config.Protocols = &p
	ts.Start()
	t.Cleanup(ts.Close)
	return ts.URL
}
