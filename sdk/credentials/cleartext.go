package credentials

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// ErrClearText is the error RefuseClearText and the transport Bearer
// return for a token that would travel in clear text beyond loopback.
var ErrClearText = errors.New("refusing to send a bearer token in clear text")

// IsLoopback reports whether host (a URL's host name, without port) is
// this machine: "localhost", an address in 127.0.0.0/8, or ::1. Other
// names are not resolved.
func IsLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	return ip != nil && ip.IsLoopback()
}

// RefuseClearText returns an error wrapping ErrClearText, naming the URL,
// when a token sent to serverURL would travel in clear text beyond this
// machine: its scheme is http and its host is not loopback. It says nothing
// about other URLs.
func RefuseClearText(serverURL string) error {
	u, err := url.Parse(serverURL)
	if err != nil {
		return fmt.Errorf("credentials: server URL %q: %w", serverURL, err)
	}
	return refuseClearText(u)
}

func refuseClearText(u *url.URL) error {
	if strings.EqualFold(u.Scheme, "https") || IsLoopback(u.Hostname()) {
		return nil
	}
	shown := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}
	return fmt.Errorf("%w to %s: use https://, or a loopback address", ErrClearText, shown.String())
}

// Bearer returns a transport that sends each request through base (or
// http.DefaultTransport when nil) with "Authorization: Bearer TOKEN",
// the token taken from src at each request. A request that would carry
// the token in clear text beyond loopback fails with ErrClearText before
// anything is sent; one for which src has no token fails with src's
// error. The transport forwards CloseIdleConnections to base.
func Bearer(base http.RoundTripper, src TokenSource) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &bearer{base: base, src: src}
}

type bearer struct {
	base http.RoundTripper
	src  TokenSource
}

// RoundTrip implements http.RoundTripper.
func (b *bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := refuseClearText(req.URL); err != nil {
		closeBody(req)
		return nil, fmt.Errorf("credentials: %w", err)
	}
	token, err := b.src.Token()
	if token == "" {
		closeBody(req)
		if err == nil {
			err = errors.New("credentials: the token source has no token")
		}
		return nil, err
	}
	out := req.Clone(req.Context())
	out.Header.Set("Authorization", "Bearer "+token)
	return b.base.RoundTrip(out)
}

// CloseIdleConnections closes the idle connections of the transport
// underneath.
func (b *bearer) CloseIdleConnections() {
	if c, ok := b.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// closeBody closes the body of a request that will not be sent, as a
// RoundTripper must.
func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}
