package credentials

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
)

// TLSFiles names the PEM files of a client's side of TLS. Empty fields are
// left out.
type TLSFiles struct {
	// CA is a bundle of CA certificates that sign the server's
	// certificate; they replace the system's roots.
	CA string
	// Cert and Key are the client certificate (with its chain) and its
	// private key, presented for mutual TLS. They go together.
	Cert, Key string
}

// Config returns base (cloned; a new configuration when base is nil) with
// the CA bundle as its roots and the client certificate to present. It
// reads the files now and fails when one cannot be read or parsed, or when
// base already sets what a file would (its roots, or a client
// certificate). The client certificate is read again at a handshake when
// either of its files changed, so a rotated certificate is used without a
// restart; a pair that does not load (one file replaced, not yet the
// other) leaves the last good one in use. With no file named, Config
// returns base itself.
func (f TLSFiles) Config(base *tls.Config) (*tls.Config, error) {
	if f == (TLSFiles{}) {
		return base, nil
	}
	if (f.Cert == "") != (f.Key == "") {
		return nil, errors.New("credentials: a client certificate needs both its certificate and its key file")
	}
	cfg := &tls.Config{}
	if base != nil {
		cfg = base.Clone()
	}
	if f.CA != "" {
		if cfg.RootCAs != nil {
			return nil, errors.New("credentials: the TLS configuration already has its roots; leave out the CA file or the roots")
		}
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, fmt.Errorf("credentials: CA bundle: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("credentials: CA bundle %s: no PEM certificate in it", f.CA)
		}
		cfg.RootCAs = pool
	}
	if f.Cert != "" {
		if len(cfg.Certificates) > 0 || cfg.GetClientCertificate != nil {
			return nil, errors.New("credentials: the TLS configuration already has a client certificate; leave out the certificate files or the certificate")
		}
		kp := &keyPair{cert: f.Cert, key: f.Key}
		if _, err := kp.load(); err != nil {
			return nil, err
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return kp.current() }
	}
	return cfg, nil
}

// keyPair is a client certificate read from its files, and read again
// when they change.
type keyPair struct {
	cert, key string

	mu             sync.Mutex
	certInfo, info os.FileInfo // of the cert and key files when last loaded
	pair           *tls.Certificate
}

// current returns the key pair, loading it again first if a file changed;
// if that fails, the last good one.
func (k *keyPair) current() (*tls.Certificate, error) {
	k.mu.Lock()
	ci, cerr := os.Stat(k.cert)
	ki, kerr := os.Stat(k.key)
	same := cerr == nil && kerr == nil && sameFile(k.certInfo, ci) && sameFile(k.info, ki)
	pair := k.pair
	k.mu.Unlock()
	if same {
		return pair, nil
	}
	if p, err := k.load(); err == nil {
		return p, nil
	}
	return pair, nil
}

// load reads the key pair and keeps it.
func (k *keyPair) load() (*tls.Certificate, error) {
	ci, err := os.Stat(k.cert)
	if err != nil {
		return nil, fmt.Errorf("credentials: client certificate: %w", err)
	}
	ki, err := os.Stat(k.key)
	if err != nil {
		return nil, fmt.Errorf("credentials: client key: %w", err)
	}
	pair, err := tls.LoadX509KeyPair(k.cert, k.key)
	if err != nil {
		return nil, fmt.Errorf("credentials: client certificate %s and key %s: %w", k.cert, k.key, err)
	}
	k.mu.Lock()
	k.pair, k.certInfo, k.info = &pair, ci, ki
	k.mu.Unlock()
	return &pair, nil
}

// sameFile reports whether b is the file a was: the same inode, size and
// modification time.
func sameFile(a, b os.FileInfo) bool {
	return a != nil && b != nil && os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}
