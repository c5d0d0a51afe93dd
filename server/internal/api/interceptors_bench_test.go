package api_test

import (
	"context"
	"net/http"
	"testing"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/server/internal/api"
	"github.com/pawlcfg/pawl/server/internal/auth"
)

// BenchmarkTextInterceptor is the per-call cost of checking every string
// of a typical request: an instance's registration (identity, boot, zone,
// app version, eight labels).
func BenchmarkTextInterceptor(b *testing.B) {
	req := connect.NewRequest(&pawlv1.RegisterRequest{Instance: &pawlv1.Instance{
		WorkloadIdentity: "spiffe://prod.example/ns/payments/sa/routing-7f9c", BootId: "6a1f0c2e-9b4d-4e57-8a3b-2f1d0c9e8b7a",
		Zone: "eu-west-1a", AppVersion: "2.14.3",
		Labels: map[string]string{"env": "prod", "team": "payments", "service": "routing", "region": "eu-west-1",
			"tier": "backend", "canary": "false", "cluster": "prod-eu-1", "owner": "payments-oncall"},
	}})
	next := func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) { return nil, nil }
	call := api.TextInterceptor(4096).WrapUnary(next)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := call(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStreamLimitInterceptor is the per-stream cost of counting a
// stream against its holder and freeing its slot: a KV watch of an
// authenticated principal, and of a remote address without an auth file.
func BenchmarkStreamLimitInterceptor(b *testing.B) {
	next := func(context.Context, connect.StreamingHandlerConn) error { return nil }
	handler := api.StreamLimitInterceptor(api.StreamLimits{Streams: 25_000, Watchers: 20_000}).WrapStreamingHandler(next)
	conn := &benchConn{spec: connect.Spec{Procedure: pawlv1connect.KVServiceWatchProcedure, StreamType: connect.StreamTypeServer},
		peer: connect.Peer{Addr: "10.1.2.3:52314", Protocol: connect.ProtocolGRPC}}
	for name, ctx := range map[string]context.Context{
		"principal": auth.NewContext(context.Background(), auth.Principal{Name: "fleet", Method: auth.MethodToken}),
		"address":   context.Background(),
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := handler(ctx, conn); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchConn is the little of a stream the stream limiter reads: its
// procedure and its peer.
type benchConn struct {
	connect.StreamingHandlerConn
	spec connect.Spec
	peer connect.Peer
}

func (c *benchConn) Spec() connect.Spec         { return c.spec }
func (c *benchConn) Peer() connect.Peer         { return c.peer }
func (c *benchConn) RequestHeader() http.Header { return http.Header{} }
