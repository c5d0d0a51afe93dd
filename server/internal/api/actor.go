package api

import (
	"context"

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
	if a := req.Header().Get(ActorHeader); a != "" {
		return a
	}
	return req.Peer().Addr
}
