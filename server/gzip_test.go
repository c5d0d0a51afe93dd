package server_test

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/server"
)

// TestGzipRequestInflatingPastTheLimit: a gzip-compressed request whose
// message inflates past the route's read limit is refused with
// ResourceExhausted naming the flags behind the limit, as an
// uncompressed one is, over Connect, gRPC and gRPC-Web; nothing changes.
func TestGzipRequestInflatingPastTheLimit(t *testing.T) {
	// Small limits, so that what passes them is quick to compress.
	srv := testserver.Start(t, server.WithMaxValueBytes(64<<10), server.WithTxnLimits(16, 64<<10), server.WithMaxValidatorBytes(1<<20))
	ctx := context.Background()
	client := testserver.HTTPClient(t)
	for name, protocol := range map[string][]connect.ClientOption{"connect": nil, "grpc": {connect.WithGRPC()}, "grpc-web": {connect.WithGRPCWeb()}} {
		t.Run(name, func(t *testing.T) {
			opts := append([]connect.ClientOption{connect.WithSendGzip()}, protocol...)
			kv := pawlv1connect.NewKVServiceClient(client, srv.URL, opts...)
			_, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "/gz/a", Value: make([]byte, 1<<20)}))
			wantCode(t, "a gzip Put inflating past the limit", err, connect.CodeResourceExhausted, "inflates to more than", "--max-value-bytes", "--max-txn-bytes")
			rs := pawlv1connect.NewReleaseServiceClient(client, srv.URL, opts...)
			_, err = rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: &pawlv1.ReleaseSpec{ConfigId: "gz", Content: make([]byte, 1<<20)}}))
			wantCode(t, "a gzip release inflating past the limit", err, connect.CodeResourceExhausted, "inflates to more than", "--max-value-bytes")
			vs := pawlv1connect.NewValidatorServiceClient(client, srv.URL, opts...)
			_, err = vs.Validate(ctx, connect.NewRequest(&pawlv1.ValidateRequest{Content: make([]byte, 2<<20)}))
			wantCode(t, "a gzip dry run inflating past the limit", err, connect.CodeResourceExhausted, "inflates to more than", "--max-validator-bytes")
			// A compressed request within the limits still works.
			if _, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "/gz/small", Value: make([]byte, 32<<10)})); err != nil {
				t.Errorf("a gzip Put within the limit: %v", err)
			}
		})
	}
	_, err := pawlv1connect.NewKVServiceClient(client, srv.URL).Get(ctx, connect.NewRequest(&pawlv1.GetRequest{Key: "/gz/a"}))
	wantCode(t, "the refused Put's key", err, connect.CodeNotFound)
}
