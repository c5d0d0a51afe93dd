package api

import (
	"context"
	"net/http"

	"connectrpc.com/connect"

	"github.com/pawlcfg/pawl/server/internal/auth"
)

// ActorHeader names whom the caller acts for. With an auth file it is a
// note beside the authenticated principal, recorded as "principal (on
// behalf of X)"; without one nobody is authenticated, and it is recorded
// as it is.
const ActorHeader = "Pawl-Actor"

// actor is who is calling, as records name it (the uploader of a
// validator, the creator of a release, the actor of a receipt, a stop, a
// retirement or a revocation): the authenticated principal, with its
// on-behalf-of note. Without an auth file it is the Pawl-Actor header,
// else the peer address.
func actor(ctx context.Context, req connect.AnyRequest) string {
	p, ok := auth.PrincipalFrom(ctx)
	if ok && p.Method != auth.MethodOpen {
		return p.Actor()
	}
	return actorOf(req.Header(), req.Peer())
}

// actorOf is the Pawl-Actor header, or the peer's address when there is
// none or it is refused (actorProblem: the call is refused, and the record
// of the refusal names the address rather than what would break it).
func actorOf(h http.Header, peer connect.Peer) string {
	if a := h.Get(ActorHeader); a != "" && actorProblem(a) == "" {
		return a
	}
	return peer.Addr
}

// streamConnKey carries a streaming call's connection in its context:
// connect puts a streaming call's CallInfo there only after the
// interceptors ran.
type streamConnKey struct{}

// HeaderActor is a PrincipalFunc for a server without authentication: the
// principal is the call's Pawl-Actor header, or else the peer's address.
func HeaderActor(ctx context.Context) (principal, onBehalfOf string) {
	if header, peer, ok := callOf(ctx); ok {
		return actorOf(header, peer), ""
	}
	return "", ""
}

// callOf is the request header and peer of the call ctx belongs to, unary
// or streaming.
func callOf(ctx context.Context) (http.Header, connect.Peer, bool) {
	if info, ok := connect.CallInfoForHandlerContext(ctx); ok {
		return info.RequestHeader(), info.Peer(), true
	}
	if conn, ok := ctx.Value(streamConnKey{}).(connect.StreamingHandlerConn); ok {
		return conn.RequestHeader(), conn.Peer(), true
	}
	return nil, connect.Peer{}, false
}

// Caller returns the PrincipalFunc of the audit log. With authentication
// (authenticated), it is the principal the auth interceptor found, and a
// call refused before one was found is recorded as unauthenticated, with
// the peer's address, never with what its Pawl-Actor header claims.
// Without, it is HeaderActor.
func Caller(authenticated bool) PrincipalFunc {
	if !authenticated {
		return HeaderActor
	}
	return func(ctx context.Context) (principal, onBehalfOf string) {
		if p, ok := auth.PrincipalFrom(ctx); ok {
			return p.Name, p.OnBehalfOf
		}
		return "unauthenticated " + peerOf(ctx), ""
	}
}

// peerOf is the address of the call's peer.
func peerOf(ctx context.Context) string {
	if _, peer, ok := callOf(ctx); ok {
		return peer.Addr
	}
	return "an unknown peer"
}
