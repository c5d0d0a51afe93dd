package api

import (
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"github.com/pawlcfg/pawl/server/internal/metrics"
)

// LimitBody guards the request bodies of a Connect handler, next, before
// Connect decodes them, so that what a client sees names what it can
// change and every malformed body is the client's mistake:
//
//   - a body (Connect unary) or a message (gRPC, gRPC-Web, Connect
//     streaming) larger than max bytes is refused with ResourceExhausted
//     and a message that says what the limit is made of, limits (the pawld
//     flags behind it), instead of Connect's "message size N is larger
//     than configured max M", which names a number no flag sets;
//   - a body that ends inside a message's 5-byte prefix or its payload, a
//     message flagged compressed when the request names no compression,
//     and a message with flags a client never sends are InvalidArgument
//     (Connect reports them as Internal, the server's fault).
//
// Give next a Connect read limit above max (connect.WithReadMaxBytes), so
// that this guard speaks first; Connect still bounds what a compressed
// message inflates to. The guard reads nothing ahead: it counts and checks
// what Connect reads.
//
// A refusal's LimitExceeded detail names flag, the main flag behind max.
func LimitBody(next http.Handler, max int, flag, limits string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = newGuardedBody(r, int64(max), flag, limits)
		}
		next.ServeHTTP(w, r)
	})
}

// guardedBody is a request body that checks the framing and size of what
// is read through it. Connect reads a body from one goroutine.
type guardedBody struct {
	body   io.ReadCloser
	max    int64
	flag   string
	limits string
	// enveloped says the body is a sequence of messages, each behind a
	// 5-byte prefix (flags, big-endian length); otherwise the body is one
	// message.
	enveloped bool
	// compressed says the request names a compression, so a message may
	// be flagged compressed.
	compressed bool

	// ctx is the request's, where a refusal is counted
	// (metrics.RefusedBody).
	ctx context.Context

	read      int64   // bytes of the body read so far
	prefix    [5]byte // the prefix being read
	prefixLen int     // bytes of prefix read
	remaining int64   // bytes of the current message's payload still to come
	err       error   // sticky: once refused, every read fails the same way
}

func newGuardedBody(r *http.Request, max int64, flag, limits string) *guardedBody {
	ct := strings.ToLower(r.Header.Get("Content-Type"))
	g := &guardedBody{body: r.Body, max: max, flag: flag, limits: limits, ctx: r.Context()}
	switch {
	case strings.HasPrefix(ct, "application/grpc"): // gRPC and gRPC-Web
		g.enveloped = true
		g.compressed = named(r.Header.Get("Grpc-Encoding"))
	case strings.HasPrefix(ct, "application/connect+"):
		g.enveloped = true
		g.compressed = named(r.Header.Get("Connect-Content-Encoding"))
	}
	return g
}

// named reports whether a compression header names a compression.
func named(encoding string) bool { return encoding != "" && encoding != "identity" }

// Read reads from the body and checks what it read. On a refusal it
// returns no bytes and the refusal (a *connect.Error, which Connect sends
// as it is), now and on every later call: io.ReadFull, which Connect reads
// prefixes with, drops an error that comes with the bytes it asked for.
func (g *guardedBody) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	n, err := g.body.Read(p)
	if cerr := g.check(p[:n]); cerr != nil {
		g.err = cerr
		return 0, cerr
	}
	if errors.Is(err, io.EOF) && g.enveloped && (g.prefixLen > 0 || g.remaining > 0) {
		g.err = g.truncated()
		return 0, g.err
	}
	return n, err
}

// Close closes the body.
func (g *guardedBody) Close() error { return g.body.Close() }

// check accounts for b, the bytes just read.
func (g *guardedBody) check(b []byte) error {
	g.read += int64(len(b))
	if !g.enveloped {
		if g.read > g.max {
			return g.tooLarge(fmt.Sprintf("the request body is more than %d bytes", g.max), g.read)
		}
		return nil
	}
	for len(b) > 0 {
		if g.remaining > 0 {
			k := min(g.remaining, int64(len(b)))
			g.remaining -= k
			b = b[k:]
			continue
		}
		k := copy(g.prefix[g.prefixLen:], b)
		g.prefixLen += k
		b = b[k:]
		if g.prefixLen < len(g.prefix) {
			return nil
		}
		g.prefixLen = 0
		flags, size := g.prefix[0], int64(binary.BigEndian.Uint32(g.prefix[1:]))
		switch {
		case size > g.max:
			return g.tooLarge(fmt.Sprintf("the request message is %d bytes", size), size)
		case flags&^1 != 0:
			return InvalidArgument("malformed request: a message has flags 0x%02x; a client sends 0x00, or 0x01 for a compressed message", flags)
		case flags == 1 && !g.compressed:
			return InvalidArgument("malformed request: a message is flagged compressed, but the request names no compression (grpc-encoding or connect-content-encoding)")
		}
		g.remaining = size
	}
	return nil
}

// tooLarge refuses a body or a message of size bytes (as far as read),
// and counts the refusal here: Connect answers a unary call whose body it
// cannot read before any interceptor runs.
func (g *guardedBody) tooLarge(what string, size int64) error {
	metrics.RefusedBody(g.ctx, strings.TrimPrefix(g.flag, "--"))
	return LimitExceeded(g.flag, uint64(size), uint64(g.max), "bytes",
		"%s; the server reads at most %d bytes of one request here: %s", what, g.max, g.limits)
}

func (g *guardedBody) truncated() error {
	if g.prefixLen > 0 {
		return InvalidArgument("malformed request: the body ends inside a message's 5-byte prefix (%d of 5 bytes)", g.prefixLen)
	}
	return InvalidArgument("malformed request: the body ends %d bytes before the end of the message its prefix announced", g.remaining)
}

// GzipRequests is a handler option for gzip, the compression every client
// may use: responses are compressed by newCompressor, and a request
// message that inflates past max bytes is refused with ResourceExhausted
// and the message and LimitExceeded detail (naming flag) LimitBody gives,
// naming limits, instead of Connect's
// "message size N is larger than configured max M". Give it the max and
// limits of the route's LimitBody (which sees only the compressed bytes),
// and a Connect read limit above max, so that this guard speaks first.
func GzipRequests(max int, flag, limits string, newCompressor func() connect.Compressor) connect.HandlerOption {
	return connect.WithCompression("gzip", func() connect.Decompressor {
		return &inflateGuard{max: int64(max), flag: flag, limits: limits}
	}, newCompressor)
}

// GzipCompressor is the standard library's gzip writer as a Connect
// compressor, as Connect's own gzip compresses.
func GzipCompressor() connect.Compressor { return gzip.NewWriter(io.Discard) }

// inflateGuard is a gzip reader that refuses to inflate one message past
// max bytes.
type inflateGuard struct {
	gzip.Reader
	max, n int64
	flag   string
	limits string
}

func (g *inflateGuard) Read(p []byte) (int, error) {
	n, err := g.Reader.Read(p)
	if g.n += int64(n); g.n > g.max {
		return 0, LimitExceeded(g.flag, uint64(g.n), uint64(g.max), "bytes",
			"the request message inflates to more than %d bytes; the server reads at most %d bytes of one request here: %s", g.max, g.max, g.limits)
	}
	return n, err
}

// Reset starts on the next message.
func (g *inflateGuard) Reset(r io.Reader) error {
	g.n = 0
	return g.Reader.Reset(r)
}
