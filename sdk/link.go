package sdk

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
)

// outageLogEvery is the least time between two warnings of one outage:
// the first failure is logged at once, the retries in between at debug
// level only, and the recovery once, with the count.
const outageLogEvery = 30 * time.Second

// linkState is what the client knows of its connection to the server:
// whether it works, the last failure, and how many in a row, which also
// paces the outage's log lines.
type linkState struct {
	mu        sync.Mutex
	connected bool
	lastErr   error
	lastErrAt time.Time
	failures  int       // in a row, since the link last worked
	since     time.Time // the first failure of the outage
	logged    time.Time // the last warning of the outage
}

// linkFailed records a failed attempt to reach the server (what: the
// call), and logs it as the outage's pacing allows.
func (c *Client) linkFailed(what string, err error) {
	now := time.Now()
	l := &c.link
	l.mu.Lock()
	l.connected = false
	l.lastErr, l.lastErrAt = err, now
	l.failures++
	n, since := l.failures, l.since
	first := n == 1
	if first {
		l.since, since = now, now
	}
	warn := first || now.Sub(l.logged) >= max(outageLogEvery, c.cfg.backoffMax)
	if warn {
		l.logged = now
	}
	l.mu.Unlock()
	switch {
	case first:
		c.cfg.log.Warn("pawl: the server cannot be reached; retrying with backoff (further failures are logged at debug level, with a warning every 30s)",
			"server", c.Server(), "call", what, "error", err)
	case warn:
		c.cfg.log.Warn("pawl: the server still cannot be reached; retrying", "server", c.Server(), "call", what,
			"failures", n, "since", since.UTC().Format(time.RFC3339), "error", err)
	default:
		c.cfg.log.Debug("pawl: retrying", "server", c.Server(), "call", what, "failures", n, "error", err)
	}
}

// linkWorks records that the server answered; after an outage it logs the
// recovery.
func (c *Client) linkWorks() {
	l := &c.link
	l.mu.Lock()
	n, since, was := l.failures, l.since, l.connected
	l.connected, l.failures = true, 0
	l.mu.Unlock()
	if n > 0 {
		c.cfg.log.Info("pawl: the server is reachable again", "server", c.Server(), "failures", n,
			"outage", time.Since(since).Round(time.Millisecond))
	} else if !was {
		c.cfg.log.Debug("pawl: connected", "server", c.Server())
	}
}

// Status is the client's state for a readiness or liveness probe.
type Status struct {
	// Registered says the server took this boot's registration.
	Registered bool
	// Server is the server in use (see Client.Server).
	Server string
	// Connected says the session (or the assignment stream) is open and
	// has answered since the last failure.
	Connected bool
	// LastError is the last failure to reach the server (nil: none yet),
	// at LastErrorAt; it stays after a recovery. A lost connection is a
	// Connect Unavailable error.
	LastError   error
	LastErrorAt time.Time
	// Failures is how many attempts in a row failed (0 when Connected).
	Failures int
	// Configs is each applied config's state, by config ID.
	Configs map[string]ConfigStatus
}

// ConfigStatus is one applied config in a Status.
type ConfigStatus struct {
	// Generation and Stage are the applied snapshot's (Stage empty: the
	// active generation).
	Generation int64
	Stage      string
	// FromCache says it was read from the disk cache at start and the
	// server has not confirmed it yet.
	FromCache bool
	// AppliedAt is when it was swapped in, Age how long ago.
	AppliedAt time.Time
	Age       time.Duration
}

// Status returns the client's state now: registration, server, the last
// failure and each applied config. It takes the link's lock only.
func (c *Client) Status() Status {
	now := time.Now()
	l := &c.link
	l.mu.Lock()
	st := Status{Connected: l.connected, LastError: l.lastErr, LastErrorAt: l.lastErrAt, Failures: l.failures}
	l.mu.Unlock()
	st.Registered = c.epoch.Load() > 0
	st.Server = c.Server()
	snaps := c.Configs()
	st.Configs = make(map[string]ConfigStatus, len(snaps))
	for id, s := range snaps {
		st.Configs[id] = ConfigStatus{Generation: s.Generation, Stage: s.Stage, FromCache: s.FromCache, AppliedAt: s.AppliedAt, Age: now.Sub(s.AppliedAt)}
	}
	return st
}

// ErrConnectionLost is wrapped by the Unavailable error of a call or a
// stream whose connection to the server broke (the server died, or the
// network cut it), in place of Connect's "internal: protocol error:
// incomplete envelope".
var ErrConnectionLost = errors.New("the connection to the server was lost")

// lostConnection marks a response body's read error as the loss of the
// connection.
type lostConnection struct{ err error }

func (e *lostConnection) Error() string { return ErrConnectionLost.Error() + ": " + e.err.Error() }
func (e *lostConnection) Unwrap() []error {
	return []error{ErrConnectionLost, e.err}
}

// lossTransport marks the read errors of response bodies (other than the
// end of the body, and the request's own cancellation) as lost
// connections, which lossInterceptor turns into Unavailable.
type lossTransport struct{ next http.RoundTripper }

func (t lossTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body = &lossBody{ReadCloser: resp.Body, ctx: req.Context()}
	return resp, nil
}

// CloseIdleConnections closes the idle connections of the transport
// underneath.
func (t lossTransport) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

type lossBody struct {
	io.ReadCloser
	ctx context.Context
}

func (b *lossBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && b.ctx.Err() == nil {
		err = &lostConnection{err: err}
	}
	return n, err
}

// unavailable maps an error that carries a lost connection to a Connect
// Unavailable error; every other error is returned as is.
func unavailable(err error) error {
	var lost *lostConnection
	if err == nil || connect.CodeOf(err) == connect.CodeUnavailable || !errors.As(err, &lost) {
		return err
	}
	return connect.NewError(connect.CodeUnavailable, lost)
}

// lossInterceptor gives every call and stream of the client's the
// Unavailable code for a lost connection.
type lossInterceptor struct{}

func (lossInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		resp, err := next(ctx, req)
		return resp, unavailable(err)
	}
}

func (lossInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		return lossConn{next(ctx, spec)}
	}
}

func (lossInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

type lossConn struct{ connect.StreamingClientConn }

func (c lossConn) Receive(msg any) error { return unavailable(c.StreamingClientConn.Receive(msg)) }

func (c lossConn) CloseResponse() error { return unavailable(c.StreamingClientConn.CloseResponse()) }
