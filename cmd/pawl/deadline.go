package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
)

// DefaultTimeout is how long one call to the server may take without
// --timeout or PAWL_TIMEOUT. Every Pawl RPC answers in milliseconds when
// the server is healthy; 30 seconds leaves room for a busy server and a
// slow validator, and no more.
const DefaultTimeout = 30 * time.Second

// noticeAfter is how long a call runs before the CLI says what it is
// waiting for: long enough that a healthy server never causes it.
const noticeAfter = 5 * time.Second

// deadlines gives every unary call its own deadline (--timeout), says on
// stderr what it is waiting for once a call takes noticeAfter (or half
// the timeout, if that is shorter), and turns a call that ran out of time
// into an error that names the server, the procedure and the flag.
// Streams (watch) have no deadline: they run until interrupted.
type deadlines struct {
	server  string
	timeout time.Duration
	stderr  io.Writer
	mu      *sync.Mutex // serialises the notices of concurrent calls
}

func (d deadlines) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		ctx, cancel := context.WithTimeout(ctx, d.timeout)
		defer cancel()
		procedure := strings.TrimPrefix(req.Spec().Procedure, "/pawl.v1.")
		noticed := make(chan struct{})
		notice := time.AfterFunc(min(noticeAfter, d.timeout/2), func() {
			defer close(noticed)
			d.mu.Lock()
			defer d.mu.Unlock()
			fmt.Fprintf(d.stderr, "pawl: waiting for %s to answer %s (giving up after %s; --timeout)\n", d.server, procedure, d.timeout)
		})
		resp, err := next(ctx, req)
		if !notice.Stop() {
			<-noticed // the notice is written before anything that follows the call
		}
		if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) && connect.CodeOf(err) == connect.CodeDeadlineExceeded {
			// Keep the code (promote and rollback resolve a lost answer
			// by it) and say what ran out.
			err = connect.NewError(connect.CodeDeadlineExceeded,
				fmt.Errorf("no answer from %s to %s within %s (--timeout)", d.server, procedure, d.timeout))
		}
		return resp, err
	}
}

func (d deadlines) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (d deadlines) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// defaultTimeout is $PAWL_TIMEOUT when it is a duration, else
// DefaultTimeout.
func defaultTimeout() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("PAWL_TIMEOUT")); err == nil && d > 0 {
		return d
	}
	return DefaultTimeout
}
