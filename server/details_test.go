package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/internal/testkit/wasmgen"
	"github.com/pawlcfg/pawl/sdk/pawlerr"
	"github.com/pawlcfg/pawl/server"
)

// wantLimit checks that err is RESOURCE_EXHAUSTED with a LimitExceeded
// detail naming flag, max and unit, and a value that passes check.
func wantLimit(t *testing.T, what string, err error, flag string, max uint64, unit string, value func(uint64) bool) {
	t.Helper()
	l, ok := pawlerr.LimitFrom(err)
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !ok || l.GetLimit() != flag || l.GetLimitValue() != max ||
		l.GetUnit() != unit || !value(l.GetValue()) {
		t.Fatalf("%s: %v with detail %v; want RESOURCE_EXHAUSTED with LimitExceeded{%s, limit_value %d %s}", what, err, l, flag, max, unit)
	}
}

func exactly(n uint64) func(uint64) bool { return func(v uint64) bool { return v == n } }
func over(n uint64) func(uint64) bool    { return func(v uint64) bool { return v > n } }

// TestErrorDetailsInEveryProtocol: what a program must act on travels as
// an error detail, decoded the same by Connect, gRPC and gRPC-Web
// clients: the limit a request hit (a value, a transaction, a request
// body, a watch over the principal's limit, a validator module's shape),
// the key's revision after a failed compare-and-swap, the violations of
// rejected content, and the pointer after a Promote that expected it
// elsewhere.
func TestErrorDetailsInEveryProtocol(t *testing.T) {
	const maxValue = 4096
	srv := testserver.Start(t, server.WithMaxValueBytes(maxValue), server.WithTxnLimits(3, 1<<20), server.WithStreamLimits(0, 1))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	setup := testserver.HTTPClient(t)
	is := pawlv1connect.NewInstanceServiceClient(setup, srv.URL)
	register(t, is, "pay-1", "boot-a", "zone-a", map[string]string{"env": "prod"})
	register(t, is, "pay-2", "boot-a", "zone-b", map[string]string{"env": "prod"})
	digest := upload(t, newValidators(t, srv), "routing")
	rs := pawlv1connect.NewReleaseServiceClient(setup, srv.URL)
	if _, err := rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{
		Spec: releaseSpec(digest, `{"upstreams":[{"host":"a","weight":100}]}`)})); err != nil {
		t.Fatal(err)
	}
	kv0 := pawlv1connect.NewKVServiceClient(setup, srv.URL)
	current := put(t, kv0, "/cas/key", "v1")

	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			client := p.client(t)
			kv := pawlv1connect.NewKVServiceClient(client, srv.URL, p.opts...)
			vs := pawlv1connect.NewValidatorServiceClient(client, srv.URL, p.opts...)
			rs := pawlv1connect.NewReleaseServiceClient(client, srv.URL, p.opts...)
			ro := pawlv1connect.NewRolloutServiceClient(client, srv.URL, p.opts...)

			_, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "/big", Value: make([]byte, maxValue+1)}))
			wantLimit(t, "a value over the limit", err, "--max-value-bytes", maxValue, "bytes", exactly(maxValue+1))
			ops := []*pawlv1.TxnOp{{Key: "/t/1"}, {Key: "/t/2"}, {Key: "/t/3"}, {Key: "/t/4"}}
			_, err = kv.Txn(ctx, connect.NewRequest(&pawlv1.TxnRequest{Ops: ops}))
			wantLimit(t, "a transaction over the limit", err, "--max-txn-ops", 3, "ops", exactly(4))
			// Past what the server reads of one request, the body guard
			// refuses it before it is decoded.
			_, err = rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: releaseSpec(digest, strings.Repeat(" ", maxValue+64<<10+1))}))
			wantLimit(t, "a request body over the limit", err, "--max-value-bytes", maxValue+64<<10, "bytes", over(maxValue+64<<10))
			_, err = vs.Upload(ctx, connect.NewRequest(&pawlv1.UploadRequest{Wasm: wasmgen.Bomb(20, 40), Name: "bomb"}))
			wantLimit(t, "a module over a limit", err, "--validator-max-loop-depth", 32, "loops", over(32))

			watchCtx, stopWatch := context.WithCancel(ctx)
			first, err := kv.Watch(watchCtx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: "/w/"}))
			if err != nil || !first.Receive() {
				t.Fatalf("first watch: %v, %v", err, first.Err())
			}
			second, err := kv.Watch(ctx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: "/w/"}))
			if err == nil && !second.Receive() {
				err = second.Err()
			}
			wantLimit(t, "a watch over the principal's limit", err, "--max-watchers-per-principal", 1, "watchers", exactly(1))
			stopWatch()
			_ = first.Close()
			_ = second.Close()

			stale := current - 1
			_, err = kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "/cas/key", Value: []byte("v2"), ExpectedModRevision: &stale}))
			m, ok := pawlerr.RevisionMismatchFrom(err)
			if connect.CodeOf(err) != connect.CodeFailedPrecondition || !ok || m.GetKey() != "/cas/key" ||
				m.GetExpectedModRevision() != stale || m.GetCurrentModRevision() != current {
				t.Fatalf("stale Put: %v with %v; want FAILED_PRECONDITION with RevisionMismatch{/cas/key, %d, %d}", err, m, stale, current)
			}
			_, err = kv.Txn(ctx, connect.NewRequest(&pawlv1.TxnRequest{Compares: []*pawlv1.TxnCompare{{Key: "/cas/absent", ModRevision: 5}},
				Ops: []*pawlv1.TxnOp{{Key: "/cas/absent", Value: []byte("x")}}}))
			if m, ok := pawlerr.RevisionMismatchFrom(err); !ok || m.GetKey() != "/cas/absent" || m.GetExpectedModRevision() != 5 || m.GetCurrentModRevision() != 0 {
				t.Fatalf("Txn comparing an absent key: %v with %v", err, m)
			}

			_, err = rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: releaseSpec(digest, `{"upstreams":[{"host":"a","weight":50}]}`)}))
			r, ok := pawlerr.RejectedFrom(err)
			if connect.CodeOf(err) != connect.CodeInvalidArgument || !ok || r.GetValidatorDigest() != digest || len(r.GetViolations()) != 1 ||
				r.GetViolations()[0].GetPath() != "/upstreams" || r.GetViolations()[0].GetSeverity() != pawlv1.Severity_SEVERITY_ERROR {
				t.Fatalf("rejected content: %v with %v", err, r)
			}

			_, err = ro.Promote(ctx, connect.NewRequest(&pawlv1.PromoteRequest{ConfigId: "payments.routing", Generation: 1,
				ExpectedGeneration: 7, ExpectedEpoch: 2, IdempotencyKey: "promote-" + p.name}))
			pm, ok := pawlerr.PointerMovedFrom(err)
			if connect.CodeOf(err) != connect.CodeAborted || !ok || pm.GetConfigId() != "payments.routing" || pm.GetExpectedGeneration() != 7 ||
				pm.GetExpectedEpoch() != 2 || pm.GetCurrent().GetGeneration() != 0 || pm.GetCurrent().GetEpoch() != 0 {
				t.Fatalf("Promote from the wrong pointer: %v with %v", err, pm)
			}
		})
	}
}
