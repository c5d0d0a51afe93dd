package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
)

// ErrUnauthenticated means the caller presented no credential, or one the
// server does not accept; the message says which, never the credential.
var ErrUnauthenticated = errors.New("auth: unauthenticated")

// TokenPrefix starts every token.
const TokenPrefix = "pawl_"

// tokenBytes is how many random bytes a token carries.
const tokenBytes = 32

// Hash is the auth file's hash of a token: "sha256:" and the lowercase hex
// of the sha256 of its bytes.
func Hash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Authenticator finds the principal of a bearer token or a client
// certificate in the auth file it read last. Its methods are safe for
// concurrent use; Reload replaces the file without disturbing calls in
// flight, which keep the principal they were given.
type Authenticator struct {
	path string
	now  func() time.Time
	file atomic.Pointer[File]
}

// NewAuthenticator reads the auth file at path; now is the clock that
// token expiry is judged by.
func NewAuthenticator(path string, now func() time.Time) (*Authenticator, error) {
	a := &Authenticator{path: path, now: now}
	if err := a.Reload(); err != nil {
		return nil, err
	}
	return a, nil
}

// Path is the auth file's path.
func (a *Authenticator) Path() string { return a.path }

// Reload reads the auth file again and uses it from now on. If it cannot
// be read or is malformed, the file in use stays, and the error says why.
func (a *Authenticator) Reload() error {
	f, err := ReadFile(a.path)
	if err != nil {
		return err
	}
	a.file.Store(f)
	return nil
}

// Counts says how many tokens and certificate principals the file in use
// has.
func (a *Authenticator) Counts() (tokens, certificates int) {
	f := a.file.Load()
	return len(f.Tokens), len(f.Certificates)
}

// Token returns the principal of a bearer token. The token's hash is
// compared with every entry's in constant time. An unknown, malformed or
// expired token is ErrUnauthenticated.
func (a *Authenticator) Token(token string) (Principal, error) {
	body, ok := strings.CutPrefix(token, TokenPrefix)
	if raw, err := base64.RawURLEncoding.DecodeString(body); !ok || err != nil || len(raw) != tokenBytes {
		return Principal{}, fmt.Errorf("%w: the bearer token is malformed: a Pawl token is %s and the unpadded base64url of %d bytes (pawl token create makes one)",
			ErrUnauthenticated, TokenPrefix, tokenBytes)
	}
	sum := sha256.Sum256([]byte(token))
	var found *TokenEntry
	f := a.file.Load()
	for i := range f.Tokens {
		// Every entry is compared, found or not: the time taken says
		// nothing about which entry, if any, matched.
		if subtle.ConstantTimeCompare(f.Tokens[i].Hash, sum[:]) == 1 {
			found = &f.Tokens[i]
		}
	}
	if found == nil {
		return Principal{}, fmt.Errorf("%w: the bearer token is not in the server's auth file (revoked, or never added)", ErrUnauthenticated)
	}
	if !found.Expires.IsZero() && !a.now().Before(found.Expires) {
		return Principal{}, fmt.Errorf("%w: the bearer token of principal %q expired at %s; ask for a new one",
			ErrUnauthenticated, found.Principal, found.Expires.UTC().Format(time.RFC3339))
	}
	return Principal{Name: found.Principal, Method: MethodToken, Grants: found.Grants}, nil
}

// Certificate returns the principal of a client certificate that the TLS
// handshake verified: its URI SAN (a SPIFFE ID) if it has one, else its
// subject. A certificate whose principal the file does not name, or that
// is not valid now, is ErrUnauthenticated.
func (a *Authenticator) Certificate(cert *x509.Certificate) (Principal, error) {
	now := a.now()
	if now.Before(cert.NotBefore) || now.After(cert.NotAfter) {
		return Principal{}, fmt.Errorf("%w: the client certificate is valid from %s to %s, not now",
			ErrUnauthenticated, cert.NotBefore.UTC().Format(time.RFC3339), cert.NotAfter.UTC().Format(time.RFC3339))
	}
	name := CertificatePrincipal(cert)
	for _, c := range a.file.Load().Certificates {
		if c.Principal == name {
			return Principal{Name: name, Method: MethodMTLS, Grants: c.Grants}, nil
		}
	}
	return Principal{}, fmt.Errorf("%w: the client certificate's principal %q is not in the server's auth file", ErrUnauthenticated, name)
}

// CertificatePrincipal is the principal a client certificate names: its
// first URI SAN (a SPIFFE ID), else its subject.
func CertificatePrincipal(cert *x509.Certificate) string {
	if len(cert.URIs) > 0 {
		return cert.URIs[0].String()
	}
	return cert.Subject.String()
}
