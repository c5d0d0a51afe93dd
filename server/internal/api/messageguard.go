package api

import (
	"context"
	"slices"

	"connectrpc.com/connect"
)

// A stream that carries many requests (SessionService.Session: ACKs and
// watches after its hello) cannot be guarded by its interceptors on its
// first message alone, and a refusal of one of its requests must not end
// it. So the interceptors leave, on the stream's context, what they would
// do to a unary call or a stream's request: checks (authorization, text)
// and a recorder (the audit log). The handler runs them on each request
// it carries, as the procedure that request would be on its own
// (RolloutService.Ack, KVService.Watch), and answers a refusal in the
// stream. Missing an authorization check, a request is refused: deny by
// default.
type messageGuards struct {
	checks []messageCheck
	authz  bool // an authorization check is among checks
	record messageRecorder
	abort  func()
}

// messageCheck refuses a request carried by a stream (procedure is the
// procedure it would be on its own), or returns nil.
type messageCheck func(ctx context.Context, procedure string, msg any) error

// messageRecorder begins the record of a request carried by a stream,
// as its procedure's own call would be recorded: it reads who and what
// about now, on the stream's goroutine, and returns the function that
// finishes it once the outcome is known.
type messageRecorder func(ctx context.Context, procedure string, req any) finishRecord

// finishRecord records a request with its answer or error and calls done
// with the error to answer with (err, or the audit log's failure) once
// the record is durable. It does not wait: done runs on the audit log's
// writer (or on the caller's goroutine when there is nothing to record),
// and must not block.
type finishRecord func(resp any, err error, done func(error))

type guardsKey struct{}

func guardsFrom(ctx context.Context) messageGuards {
	g, _ := ctx.Value(guardsKey{}).(messageGuards)
	return g
}

// withMessageCheck adds a check; authz says it is the authorization.
func withMessageCheck(ctx context.Context, check messageCheck, authz bool) context.Context {
	g := guardsFrom(ctx)
	g.checks = append(slices.Clone(g.checks), check)
	g.authz = g.authz || authz
	return context.WithValue(ctx, guardsKey{}, g)
}

// withMessageRecorder sets the recorder.
func withMessageRecorder(ctx context.Context, record messageRecorder) context.Context {
	g := guardsFrom(ctx)
	g.record = record
	return context.WithValue(ctx, guardsKey{}, g)
}

// WithReadAbort puts on ctx (a request's) a function that makes the
// request body's pending and later reads fail at once: a stream's handler
// whose writing side failed ends its receiving side with it.
func WithReadAbort(ctx context.Context, abort func()) context.Context {
	g := guardsFrom(ctx)
	g.abort = abort
	return context.WithValue(ctx, guardsKey{}, g)
}

// checkMessage runs the checks of ctx on a request carried by a stream,
// as procedure; without an authorization check it refuses.
func checkMessage(ctx context.Context, procedure string, msg any) error {
	g := guardsFrom(ctx)
	if !g.authz {
		return newError(connect.CodePermissionDenied, "%s carried by a stream: no authorization applies to it on this server", procedure)
	}
	for _, check := range g.checks {
		if err := check(ctx, procedure, msg); err != nil {
			return err
		}
	}
	return nil
}

// recordMessage records a request carried by a stream and waits until
// its record is durable (see messageRecorder); without a recorder it
// returns err.
func recordMessage(ctx context.Context, procedure string, req, resp any, err error) error {
	res := make(chan error, 1)
	guardsFrom(ctx).beginRecord(ctx, procedure, req)(resp, err, func(err error) { res <- err })
	return <-res
}

// beginRecord begins the record of a request carried by a stream (see
// messageRecorder); without a recorder, finishing it answers err at once.
func (g messageGuards) beginRecord(ctx context.Context, procedure string, req any) finishRecord {
	if g.record == nil {
		return func(_ any, err error, done func(error)) { done(err) }
	}
	return g.record(ctx, procedure, req)
}

// abortRead makes the pending Receive of the stream of ctx fail, if the
// server put a way to on it (WithReadAbort).
func abortRead(ctx context.Context) {
	if g := guardsFrom(ctx); g.abort != nil {
		g.abort()
	}
}
