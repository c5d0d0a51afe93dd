package api

import (
	"context"
	"net/http"

	"connectrpc.com/connect"
)

// ActorHeader names who is calling; it is recorded as the uploader of a
// validator, the creator of a release, the actor of a receipt, a stop or a
// retirement. Without it the peer address is recorded.
const ActorHeader = "Pawl-Actor"

// actor is who is calling.
func actor(req connect.AnyRequest) string { return actorOf(req.Header(), req.Peer()) }

func actorOf(h http.Header, peer connect.Peer) string {
	if a := h.Get(ActorHeader); a != "" {
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
	if info, ok := connect.CallInfoForHandlerContext(ctx); ok {
		return actorOf(info.RequestHeader(), info.Peer()), ""
	}
	if conn, ok := ctx.Value(streamConnKey{}).(connect.StreamingHandlerConn); ok {
		return actorOf(conn.RequestHeader(), conn.Peer()), ""
	}
	return "", ""
}
