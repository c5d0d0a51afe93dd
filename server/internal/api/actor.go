package api

import "connectrpc.com/connect"

// ActorHeader names who is calling; it is recorded as the uploader of a
// validator, the creator of a release, the actor of a receipt, a stop or a
// retirement. Without it the peer address is recorded.
const ActorHeader = "Pawl-Actor"

// actor is who is calling.
func actor(req connect.AnyRequest) string {
	if a := req.Header().Get(ActorHeader); a != "" {
		return a
	}
	return req.Peer().Addr
}
