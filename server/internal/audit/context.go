package audit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
)

// Call is what the server knows of a call before it runs: its request ID,
// its trace ID (from a W3C traceparent header), and who makes it.
type Call struct {
	RequestID  string
	TraceID    string
	Principal  string
	OnBehalfOf string
}

type callKey struct{}

// WithCall returns ctx carrying c.
func WithCall(ctx context.Context, c Call) context.Context {
	return context.WithValue(ctx, callKey{}, c)
}

// CallFrom returns the call ctx carries, if any.
func CallFrom(ctx context.Context) (Call, bool) {
	c, ok := ctx.Value(callKey{}).(Call)
	return c, ok
}

// RequestIDFrom returns the request ID of the call ctx carries, or "".
func RequestIDFrom(ctx context.Context) string {
	c, _ := CallFrom(ctx)
	return c.RequestID
}

// NewRequestID returns a new request ID: 32 lower-case hex digits of
// random bits, unique without coordination between replicas.
func NewRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}
