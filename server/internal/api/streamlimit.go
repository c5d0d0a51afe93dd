package api

import (
	"context"
	"fmt"
	"net"
	"sync"

	"connectrpc.com/connect"

	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/server/internal/auth"
)

// StreamLimits bound what one principal holds open at once: streams of
// any kind (watches, downloads, snapshots) and, among them, watchers (KV
// watches and assignment watches). Without authentication every caller is
// the same anonymous principal, so the limits hold per remote address
// instead. Admins of an auth file are exempt (see StreamLimitInterceptor).
type StreamLimits struct {
	// Streams is how many streams of any kind one principal may hold open;
	// 0 is no limit.
	Streams int
	// Watchers is how many watch streams one principal may hold open; 0 is
	// no limit.
	Watchers int
}

// The flags of pawld that change StreamLimits, which a refusal names.
const (
	StreamsFlag  = "--max-streams-per-principal"
	WatchersFlag = "--max-watchers-per-principal"
)

// watchProcedures are the streams that count as watchers: they stay open
// for as long as their client runs.
var watchProcedures = map[string]bool{
	pawlv1connect.KVServiceWatchProcedure:                  true,
	pawlv1connect.InstanceServiceWatchAssignmentsProcedure: true,
}

// StreamLimitInterceptor refuses a stream that would take its principal
// over a limit with ResourceExhausted, naming the limit and its flag,
// before the stream reads its request; the slot is freed when the stream
// ends. Put it inside the auth interceptor, whose principal it counts by.
// Admins of an auth file are exempt: an admin may already delete every
// key, and what bounds an admin's streams is the connection limits and
// HTTP/2's concurrent streams per connection. Unary calls are not
// counted.
func StreamLimitInterceptor(limits StreamLimits) connect.Interceptor {
	return &streamLimiter{limits: limits, held: map[string]*held{}}
}

type streamLimiter struct {
	limits StreamLimits
	mu     sync.Mutex
	// held is what each principal holds, by key (see holder); a principal
	// that holds nothing has no entry.
	held map[string]*held
}

type held struct{ streams, watchers int }

func (l *streamLimiter) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc { return next }

// WrapStreamingClient leaves client streams alone: the server makes none.
func (l *streamLimiter) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (l *streamLimiter) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		key, who, exempt := holder(ctx, conn.Peer())
		if exempt {
			return next(ctx, conn)
		}
		watcher := watchProcedures[conn.Spec().Procedure]
		if err := l.take(key, who, watcher); err != nil {
			return err
		}
		defer l.release(key, watcher)
		return next(ctx, conn)
	}
}

// holder is whom a stream counts against: the authenticated principal, or
// the remote address when the server authenticates nobody; who names it in
// a refusal. exempt is true for an authenticated admin.
func holder(ctx context.Context, peer connect.Peer) (key, who string, exempt bool) {
	p, ok := auth.PrincipalFrom(ctx)
	if ok && p.Method != auth.MethodOpen {
		return "principal " + p.Name, fmt.Sprintf("principal %q", p.Name), p.IsAdmin()
	}
	host, _, err := net.SplitHostPort(peer.Addr)
	if err != nil {
		host = peer.Addr
	}
	return "address " + host, "address " + host + " (without --auth-file, the limits hold per remote address)", false
}

// take counts a stream against key, or refuses it over a limit.
func (l *streamLimiter) take(key, who string, watcher bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.held[key]
	if h == nil {
		h = &held{}
	}
	switch {
	case watcher && l.limits.Watchers > 0 && h.watchers >= l.limits.Watchers:
		return LimitExceeded(WatchersFlag, uint64(h.watchers), uint64(l.limits.Watchers), "watchers",
			"%s holds %d watch streams, the limit per principal (%s %d): close one, or ask the operator to raise it",
			who, h.watchers, WatchersFlag, l.limits.Watchers)
	case l.limits.Streams > 0 && h.streams >= l.limits.Streams:
		return LimitExceeded(StreamsFlag, uint64(h.streams), uint64(l.limits.Streams), "streams",
			"%s holds %d streams, the limit per principal (%s %d): close one, or ask the operator to raise it",
			who, h.streams, StreamsFlag, l.limits.Streams)
	}
	h.streams++
	if watcher {
		h.watchers++
	}
	l.held[key] = h
	return nil
}

func (l *streamLimiter) release(key string, watcher bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.held[key]
	h.streams--
	if watcher {
		h.watchers--
	}
	if h.streams == 0 {
		delete(l.held, key)
	}
}
