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
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "pawl test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	p := &PKI{CA: filepath.Join(dir, "ca.pem"), pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	writePEM(t, p.CA, "CERTIFICATE", caDER)
	spiffe, _ := url.Parse(ClientID)
	issue := func(name string, serial int64, tmpl *x509.Certificate) (certFile, keyFile string) {
		key := newKey(t)
		tmpl.SerialNumber, tmpl.Subject = big.NewInt(serial), pkix.Name{CommonName: name}
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		writePEM(t, certFile, "CERTIFICATE", der)
		writePEM(t, keyFile, "EC PRIVATE KEY", keyDER)
		return certFile, keyFile
	}
	p.ServerCert, p.ServerKey = issue("server", 2, &x509.Certificate{
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, DNSNames: []string{"localhost"},
	})
	p.ClientCert, p.ClientKey = issue("client", 3, &x509.Certificate{
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, URIs: []*url.URL{spiffe},
	})
	if p.server, err = tls.LoadX509KeyPair(p.ServerCert, p.ServerKey); err != nil {
		t.Fatal(err)
	}
	return p
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
