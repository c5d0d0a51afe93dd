package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"

	"connectrpc.com/connect"
)

// servers is the list of Pawl servers a client may use, and the one it
// uses now. It is the client's HTTP transport: every call goes to the
// current server, and a call that cannot reach it (the connection fails,
// breaks in the middle of a stream, or the server answers 502, 503 or
// 504), or that the server ends with Unavailable (its interceptor), moves
// the client on to the next one for its following calls. The
// client's loops then retry, as they would against one server, and resume
// from their last revision wherever they land.
type servers struct {
	urls []*url.URL
	base string // the path of the first URL, which the clients are built with
	cur  atomic.Int64
	next http.RoundTripper
}

// parseServers reads one server URL, or several separated by commas.
func parseServers(list string) ([]*url.URL, error) {
	var out []*url.URL
	for _, raw := range strings.Split(list, ",") {
		raw = strings.TrimRight(strings.TrimSpace(raw), "/")
		if !strings.HasPrefix(raw, "http://") && !strings.HasPrefix(raw, "https://") {
			return nil, fmt.Errorf("sdk: server URL %q must start with http:// or https://", raw)
		}
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("sdk: server URL %q: %v", raw, err)
		}
		out = append(out, u)
	}
	return out, nil
}

// current returns the URL of the server in use.
func (s *servers) current() string { return s.urls[s.cur.Load()%int64(len(s.urls))].String() }

// moveOn makes the server after the i-th current, unless the client
// already moved on from it.
func (s *servers) moveOn(i int64) { s.cur.CompareAndSwap(i, i+1) }

// RoundTrip implements http.RoundTripper.
func (s *servers) RoundTrip(req *http.Request) (*http.Response, error) {
	i := s.cur.Load()
	u := s.urls[i%int64(len(s.urls))]
	out := req.Clone(req.Context())
	out.URL.Scheme, out.URL.Host, out.Host = u.Scheme, u.Host, u.Host
	out.URL.Path = u.Path + strings.TrimPrefix(req.URL.Path, s.base)
	resp, err := s.next.RoundTrip(out)
	if err != nil {
		if req.Context().Err() == nil {
			s.moveOn(i)
		}
		return nil, err
	}
	switch resp.StatusCode {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		s.moveOn(i)
	}
	resp.Body = &watchedBody{ReadCloser: resp.Body, broken: func() {
		if req.Context().Err() == nil {
			s.moveOn(i)
		}
	}}
	return resp, nil
}

// watchedBody reports a response body that broke before its end: the
// server died or the connection was cut in the middle of a stream.
type watchedBody struct {
	io.ReadCloser
	broken func()
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		b.broken()
	}
	return n, err
}

// CloseIdleConnections closes the idle connections of the transport
// underneath.
func (s *servers) CloseIdleConnections() {
	if c, ok := s.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// interceptor moves the client on when a call, or a stream, ends with
// Unavailable: the server answered, but cannot serve (it lost its store,
// or it is shutting down). The server in use when the call began is the
// one it moves on from.
func (s *servers) interceptor() connect.Interceptor { return serversInterceptor{s} }

type serversInterceptor struct{ s *servers }

func (i serversInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		at := i.s.cur.Load()
		resp, err := next(ctx, req)
		if connect.CodeOf(err) == connect.CodeUnavailable && ctx.Err() == nil {
			i.s.moveOn(at)
		}
		return resp, err
	}
}

func (i serversInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		return &serversConn{StreamingClientConn: next(ctx, spec), s: i.s, at: i.s.cur.Load(), ctx: ctx}
	}
}

func (i serversInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// serversConn watches a stream's end for Unavailable.
type serversConn struct {
	connect.StreamingClientConn
	s   *servers
	at  int64
	ctx context.Context
}

func (c *serversConn) Receive(msg any) error {
	err := c.StreamingClientConn.Receive(msg)
	if err != nil && connect.CodeOf(err) == connect.CodeUnavailable && c.ctx.Err() == nil {
		c.s.moveOn(c.at)
	}
	return err
}
