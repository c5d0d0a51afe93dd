package server_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testserver"
)

// TestControlCharacterKeysRefused sends keys that would break `pawl ls`
// and every display of keys to each KV call, over Connect and gRPC: each
// is refused with InvalidArgument naming the character and where it is,
// and nothing is written.
func TestControlCharacterKeysRefused(t *testing.T) {
	srv := testserver.Start(t)
	keys := []struct{ key, says string }{
		{"/app/a\nb", "U+000A (line feed) at byte 6"},
		{"/app/a\tb", "U+0009 (tab) at byte 6"},
		{"/app/\x1b[2Jx", "U+001B (escape) at byte 5"},
		{"/app/\u202eexe.txt", "U+202E (bidirectional formatting character) at byte 5"},
		{"/app/\u0085", "U+0085 (C1 control character)"},
	}
	for _, p := range protocols {
		if p.name != "connect-h2c" && p.name != "grpc" {
			continue
		}
		t.Run(p.name, func(t *testing.T) {
			kv := pawlv1connect.NewKVServiceClient(p.client(t), srv.URL, p.opts...)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			before := currentRevision(t, kv)
			for _, k := range keys {
				_, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: k.key, Value: []byte("v")}))
				wantCode(t, "Put", err, connect.CodeInvalidArgument, "invalid key", k.says)
				_, err = kv.Txn(ctx, connect.NewRequest(&pawlv1.TxnRequest{Ops: []*pawlv1.TxnOp{{Key: "/app/fine", Value: []byte("v")}, {Key: k.key, Value: []byte("v")}}}))
				wantCode(t, "Txn op", err, connect.CodeInvalidArgument, "op 1", k.says)
				_, err = kv.Txn(ctx, connect.NewRequest(&pawlv1.TxnRequest{Ops: []*pawlv1.TxnOp{{Key: "/app/fine", Value: []byte("v")}},
					Compares: []*pawlv1.TxnCompare{{Key: k.key}}}))
				wantCode(t, "Txn compare", err, connect.CodeInvalidArgument, "compare 0", k.says)
				_, err = kv.Delete(ctx, connect.NewRequest(&pawlv1.DeleteRequest{Key: k.key}))
				wantCode(t, "Delete", err, connect.CodeInvalidArgument, k.says)
				_, err = kv.Get(ctx, connect.NewRequest(&pawlv1.GetRequest{Key: k.key}))
				wantCode(t, "Get", err, connect.CodeInvalidArgument, k.says)
				_, err = kv.List(ctx, connect.NewRequest(&pawlv1.ListRequest{Prefix: k.key}))
				wantCode(t, "List", err, connect.CodeInvalidArgument, "invalid prefix", k.says)
				stream, err := kv.Watch(ctx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: k.key}))
				if err == nil {
					for stream.Receive() {
						t.Fatalf("Watch(%q) sent %v", k.key, stream.Msg())
					}
					err = stream.Err()
					stream.Close()
				}
				wantCode(t, "Watch", err, connect.CodeInvalidArgument, "invalid prefix", k.says)
			}
			if after := currentRevision(t, kv); after != before {
				t.Fatalf("the refused calls moved the revision from %d to %d", before, after)
			}
		})
	}
}
