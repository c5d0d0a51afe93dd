package server_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/server"
)

// TestFailedCallsAreLoggedUnaryAndStreaming: the log interceptor wraps
// streams as well as unary calls; a client's mistake is logged at info
// with its procedure and code.
func TestFailedCallsAreLoggedUnaryAndStreaming(t *testing.T) {
	logs := &syncBuffer{}
	srv := testserver.Start(t, server.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	kv := pawlv1connect.NewKVServiceClient(testserver.HTTPClient(t), srv.URL, connect.WithGRPC())
	ctx := context.Background()
	if _, err := kv.Get(ctx, connect.NewRequest(&pawlv1.GetRequest{Key: "no-slash"})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("Get = %v", err)
	}
	stream, err := kv.Watch(ctx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: "no-slash"}))
	if err != nil {
		t.Fatal(err)
	}
	for stream.Receive() {
	}
	if connect.CodeOf(stream.Err()) != connect.CodeInvalidArgument {
		t.Fatalf("Watch = %v", stream.Err())
	}
	_ = stream.Close()
	for _, procedure := range []string{pawlv1connect.KVServiceGetProcedure, pawlv1connect.KVServiceWatchProcedure} {
		if !strings.Contains(logs.String(), "level=INFO msg=\"rpc failed\" procedure="+procedure) {
			t.Errorf("no log line for the failed %s:\n%s", procedure, logs.String())
		}
	}
}
