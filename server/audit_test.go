package server_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/redistest"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/sdk/auditchain"
	"github.com/pawlcfg/pawl/server"
	"github.com/pawlcfg/pawl/server/internal/audit"
)

// calls is a client interceptor that sends Pawl-Actor and keeps the
// request ID of every answer (Pawl-Request-Id), success or error.
type calls struct {
	actor string
	mu    sync.Mutex
	ids   map[string][]string // by procedure
}

func (c *calls) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Pawl-Actor", c.actor)
		resp, err := next(ctx, req)
		id := ""
		var ce *connect.Error
		switch {
		case err == nil:
			id = resp.Header().Get("Pawl-Request-Id")
		case errors.As(err, &ce):
			id = ce.Meta().Get("Pawl-Request-Id")
		}
		c.mu.Lock()
		c.ids[req.Spec().Procedure] = append(c.ids[req.Spec().Procedure], id)
		c.mu.Unlock()
		return resp, err
	}
}

func (c *calls) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (c *calls) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// auditRecords lists the whole audit log a page of n at a time, checks its
// chain, and returns the records by request ID.
func auditRecords(t *testing.T, ctx context.Context, au pawlv1connect.AuditServiceClient, n int32) map[string]auditchain.Record {
	t.Helper()
	byID := map[string]auditchain.Record{}
	var chain auditchain.Chain
	token := ""
	for {
		resp, err := au.ListAudit(ctx, connect.NewRequest(&pawlv1.ListAuditRequest{PageSize: n, PageToken: token}))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range resp.Msg.GetRecords() {
			if err := chain.Next(auditchain.Stored{Position: r.GetPosition(), Hash: r.GetHash(), Canonical: r.GetCanonical()}); err != nil {
				t.Fatal(err)
			}
			rec, _ := auditchain.Decode(r.GetCanonical())
			byID[rec.RequestID] = rec
		}
		if token = resp.Msg.GetNextPageToken(); token == "" {
			return byID
		}
	}
}

// TestEveryMutationAndRefusalIsAudited makes every kind of mutation, a
// refused request and calls that are neither, then reads the audit log
// back through ListAudit: each mutation and the refusal has one record
// under the request ID its answer carried, with the principal, outcome and
// subject; reads and heartbeats have none; the chain holds; the receipts
// of the promotion and the rollback name their records; the filters
// select what they say.
func TestEveryMutationAndRefusalIsAudited(t *testing.T) {
	srv := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := testserver.HTTPClient(t)
	cl := &calls{actor: "alice", ids: map[string][]string{}}
	opt := connect.WithInterceptors(cl)
	kv := pawlv1connect.NewKVServiceClient(client, srv.URL, opt)
	c := &canaryRollout{t: t, ctx: ctx,
		is: pawlv1connect.NewInstanceServiceClient(client, srv.URL, opt, connect.WithGRPC()),
		rs: pawlv1connect.NewReleaseServiceClient(client, srv.URL, opt),
		ro: pawlv1connect.NewRolloutServiceClient(client, srv.URL, opt, connect.WithGRPC()),
	}
	c.digest = upload(t, pawlv1connect.NewValidatorServiceClient(client, srv.URL, opt), "routing")
	au := pawlv1connect.NewAuditServiceClient(client, srv.URL)

	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "/app/a", Value: []byte("1")})))
	must(kv.Txn(ctx, connect.NewRequest(&pawlv1.TxnRequest{Ops: []*pawlv1.TxnOp{{Key: "/app/b", Value: []byte("2")}, {Key: "/app/c", Value: []byte("3")}}})))
	must(kv.Delete(ctx, connect.NewRequest(&pawlv1.DeleteRequest{Key: "/app/a"})))
	if _, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "/_pawl/forged", Value: []byte("x")})); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("a Put under /_pawl/ = %v, want PERMISSION_DENIED", err)
	}
	must(kv.Get(ctx, connect.NewRequest(&pawlv1.GetRequest{Key: "/app/b"})))
	register(t, c.is, "canary-1", "b", "zone-a", map[string]string{"canary": "true"})
	register(t, c.is, "main-1", "b", "zone-b", nil)
	must(c.is.Heartbeat(ctx, connect.NewRequest(&pawlv1.HeartbeatRequest{WorkloadIdentity: "main-1", BootId: "b"})))
	promote := func(gen, from, epoch int64) *pawlv1.Receipt {
		resp, err := c.ro.Promote(ctx, connect.NewRequest(&pawlv1.PromoteRequest{ConfigId: "routing", Generation: gen,
			ExpectedGeneration: from, ExpectedEpoch: epoch, IdempotencyKey: fmt.Sprintf("p%d", gen)}))
		must(resp, err)
		return resp.Msg.GetReceipt()
	}
	for gen := int64(1); gen <= 2; gen++ {
		rel := c.create(50)
		c.ack(rel, "canary-1")
		c.ack(rel, "main-1")
		promote(gen, gen-1, 0)
	}
	rb, err := c.ro.Rollback(ctx, connect.NewRequest(&pawlv1.RollbackRequest{ConfigId: "routing", ExpectedGeneration: 2, IdempotencyKey: "rb"}))
	must(rb, err)
	// A lookup of a key no move used fences it: NOT_FOUND, and recorded.
	if _, err := c.ro.GetPromotion(ctx, connect.NewRequest(&pawlv1.GetPromotionRequest{ConfigId: "routing", IdempotencyKey: "lost-answer"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("GetPromotion of an unused key: %v", err)
	}
	c.create(40)
	must(c.ro.StopRollout(ctx, connect.NewRequest(&pawlv1.StopRolloutRequest{ConfigId: "routing", Generation: 3, Reason: "p99 up"})))
	c.create(30)
	must(c.rs.RetireMember(ctx, connect.NewRequest(&pawlv1.RetireMemberRequest{ConfigId: "routing", Generation: 4, WorkloadIdentity: "main-1", Reason: "gone"})))
	must(c.rs.RevokeRelease(ctx, connect.NewRequest(&pawlv1.RevokeReleaseRequest{ConfigId: "routing", Generation: 4, Reason: "leaks"})))

	records := auditRecords(t, ctx, au, 3)
	want := map[string]int{ // how many records of each procedure
		pawlv1connect.KVServicePutProcedure: 2, pawlv1connect.KVServiceTxnProcedure: 1, pawlv1connect.KVServiceDeleteProcedure: 1,
		pawlv1connect.ValidatorServiceUploadProcedure: 1, pawlv1connect.InstanceServiceRegisterProcedure: 2,
		pawlv1connect.ReleaseServiceCreateReleaseProcedure: 4, pawlv1connect.RolloutServiceAckProcedure: 4,
		pawlv1connect.RolloutServicePromoteProcedure: 2, pawlv1connect.RolloutServiceRollbackProcedure: 1,
		pawlv1connect.RolloutServiceStopRolloutProcedure: 1, pawlv1connect.ReleaseServiceRetireMemberProcedure: 1,
		pawlv1connect.ReleaseServiceRevokeReleaseProcedure: 1, pawlv1connect.RolloutServiceGetPromotionProcedure: 1,
		pawlv1connect.KVServiceGetProcedure: 0, pawlv1connect.InstanceServiceHeartbeatProcedure: 0, pawlv1connect.InstanceServiceListInstancesProcedure: 0,
	}
	for proc, n := range want {
		ids := cl.ids[proc]
		if len(ids) == 0 {
			t.Fatalf("the test made no call of %s", proc)
		}
		got := 0
		for _, id := range ids {
			if id == "" {
				t.Fatalf("a call of %s was answered without a request ID", proc)
			}
			rec, ok := records[id]
			if !ok {
				continue
			}
			got++
			if rec.Procedure != proc || rec.Principal != "alice" || rec.Time == "" {
				t.Errorf("the record of request %s: %+v", id, rec)
			}
		}
		if got != n {
			t.Errorf("%s: %d records of %d calls, want %d", proc, got, len(ids), n)
		}
	}
	if len(records) != 22 {
		t.Errorf("%d records in the log, want 22", len(records))
	}

	subject := func(proc string, i int) auditchain.Record { return records[cl.ids[proc][i]] }
	for _, tc := range []struct {
		rec      auditchain.Record
		outcome  string
		contains auditchain.Subject
	}{
		{subject(pawlv1connect.KVServicePutProcedure, 0), "ok", auditchain.Subject{Key: "/app/a", Revision: 1}},
		{subject(pawlv1connect.KVServicePutProcedure, 1), "permission_denied", auditchain.Subject{Key: "/_pawl/forged"}},
		{subject(pawlv1connect.KVServiceTxnProcedure, 0), "ok", auditchain.Subject{Prefix: "/app/", Revision: 3}},
		{subject(pawlv1connect.InstanceServiceRegisterProcedure, 0), "ok", auditchain.Subject{Identity: "canary-1"}},
		{subject(pawlv1connect.ReleaseServiceCreateReleaseProcedure, 1), "ok", auditchain.Subject{ConfigID: "routing", Generation: 2}},
		{subject(pawlv1connect.RolloutServiceAckProcedure, 3), "ok", auditchain.Subject{ConfigID: "routing", Generation: 2, Identity: "main-1"}},
		{subject(pawlv1connect.RolloutServiceRollbackProcedure, 0), "ok", auditchain.Subject{ConfigID: "routing", Generation: 1}},
		{subject(pawlv1connect.ReleaseServiceRetireMemberProcedure, 0), "ok", auditchain.Subject{ConfigID: "routing", Generation: 4, Identity: "main-1"}},
	} {
		s := tc.rec.Subject
		c := tc.contains
		if tc.rec.Outcome != tc.outcome || (c.Key != "" && s.Key != c.Key) || (c.Prefix != "" && s.Prefix != c.Prefix) ||
			(c.Revision != 0 && s.Revision != c.Revision) || (c.Identity != "" && s.Identity != c.Identity) ||
			(c.ConfigID != "" && s.ConfigID != c.ConfigID) || (c.Generation != 0 && s.Generation != c.Generation) {
			t.Errorf("%s: outcome %q, subject %+v; want %q and %+v", tc.rec.Procedure, tc.rec.Outcome, s, tc.outcome, c)
		}
	}
	if rec := subject(pawlv1connect.KVServicePutProcedure, 1); !strings.Contains(rec.Message, "Pawl's own records") {
		t.Errorf("the refusal's record says %q", rec.Message)
	}

	// The receipts name the records of the calls that wrote them.
	for i, rc := range []*pawlv1.Receipt{promote(2, 1, 0), rb.Msg.GetReceipt()} { // p2 again: the same receipt
		proc := []string{pawlv1connect.RolloutServicePromoteProcedure, pawlv1connect.RolloutServiceRollbackProcedure}[i]
		rec, ok := records[rc.GetRequestId()]
		if !ok || rec.Procedure != proc || rc.GetPrincipal() != "alice" || rec.Outcome != "ok" {
			t.Errorf("the receipt of %s names request %q (principal %q), whose record is %+v", proc, rc.GetRequestId(), rc.GetPrincipal(), rec)
		}
	}

	t.Run("filters", func(t *testing.T) {
		count := func(req *pawlv1.ListAuditRequest) int {
			n := 0
			for {
				resp, err := au.ListAudit(ctx, connect.NewRequest(req))
				if err != nil {
					t.Fatal(err)
				}
				n += len(resp.Msg.GetRecords())
				if req.PageToken = resp.Msg.GetNextPageToken(); req.PageToken == "" {
					return n
				}
			}
		}
		hour := time.Now().Add(time.Hour)
		for _, tc := range []struct {
			req  *pawlv1.ListAuditRequest
			want int
		}{
			{&pawlv1.ListAuditRequest{Outcome: "refused"}, 1},
			{&pawlv1.ListAuditRequest{Outcome: "permission_denied"}, 1},
			{&pawlv1.ListAuditRequest{Outcome: "failed"}, 2},   // one more: the fencing GetPromotion (NOT_FOUND)
			{&pawlv1.ListAuditRequest{Principal: "alice"}, 23}, // and the Promote repeated
			{&pawlv1.ListAuditRequest{Principal: "bob"}, 0},
			{&pawlv1.ListAuditRequest{ConfigId: "routing", Outcome: "ok"}, 15},
			{&pawlv1.ListAuditRequest{Since: timestamppb.New(hour)}, 0},
			{&pawlv1.ListAuditRequest{Until: timestamppb.New(hour), PageSize: 2}, 23},
		} {
			if got := count(tc.req); got != tc.want {
				t.Errorf("ListAudit(%v): %d records, want %d", tc.req, got, tc.want)
			}
		}
		for _, bad := range []*pawlv1.ListAuditRequest{
			{Outcome: "maybe"}, {PageToken: "nope"}, {PageSize: -1},
			{Since: timestamppb.New(hour), Until: timestamppb.New(hour.Add(-time.Minute))},
		} {
			if _, err := au.ListAudit(ctx, connect.NewRequest(bad)); connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Errorf("ListAudit(%v) = %v, want INVALID_ARGUMENT", bad, err)
			}
		}
	})

	t.Run("streams get a request ID", func(t *testing.T) {
		stream, err := kv.Watch(ctx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: "/app/"}))
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Close()
		if !stream.Receive() {
			t.Fatal(stream.Err())
		}
		if id := stream.ResponseHeader().Get("Pawl-Request-Id"); len(id) != 32 {
			t.Errorf("a watch stream's request ID is %q", id)
		}
	})
}

// failingLog is an audit log whose appends fail.
type failingLog struct{ audit.Log }

func (failingLog) Append(context.Context, auditchain.Record) (auditchain.Record, error) {
	return auditchain.Record{}, errors.New("disk full")
}

func (failingLog) AppendAsync(_ context.Context, _ auditchain.Record, done func(auditchain.Record, error)) {
	done(auditchain.Record{}, errors.New("disk full"))
}

// TestAnUnauditedCallSaysSo: when the record cannot be written, a
// mutation that succeeded answers UNAVAILABLE saying "unaudited" and that
// its change was made; a refused one keeps its code, with the note.
func TestAnUnauditedCallSaysSo(t *testing.T) {
	srv := testserver.Start(t, server.WithAuditWrapper(func(l audit.Log) audit.Log { return failingLog{l} }))
	ctx := context.Background()
	kv := newKV(t, srv)
	_, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "/app/a", Value: []byte("1")}))
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "unaudited: the request succeeded (its change was made") {
		t.Fatalf("a Put whose record failed = %v", err)
	}
	if got, err := kv.Get(ctx, connect.NewRequest(&pawlv1.GetRequest{Key: "/app/a"})); err != nil || string(got.Msg.GetKv().GetValue()) != "1" {
		t.Fatalf("the unaudited Put's change: %v, %v", got, err)
	}
	_, err = kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "/_pawl/forged", Value: []byte("1")}))
	if connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), "(unaudited: its audit record could not be written: disk full)") {
		t.Fatalf("a refused Put whose record failed = %v", err)
	}
}

// TestTwoRedisReplicasAuditToOneChain: two servers sharing a Redis store
// take mutations at once; their records form one chain with every
// mutation in it once.
func TestTwoRedisReplicasAuditToOneChain(t *testing.T) {
	_, prefix := redistest.Shared(t)
	opts := []server.Option{server.WithStore("redis://" + redistest.Addr() + "/0"), server.WithRedisPrefix(prefix)}
	ctx := context.Background()
	var kvs []pawlv1connect.KVServiceClient
	for range 2 {
		kvs = append(kvs, newKV(t, testserver.Start(t, opts...)))
	}
	const per = 40
	var wg sync.WaitGroup
	for i := range 2 * per {
		wg.Go(func() {
			if _, err := kvs[i%2].Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: fmt.Sprintf("/k/%d", i), Value: []byte("v")})); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	au := pawlv1connect.NewAuditServiceClient(testserver.HTTPClient(t), testserver.Start(t, opts...).URL)
	if n := len(auditRecords(t, ctx, au, 1000)); n != 2*per {
		t.Errorf("%d records, want %d", n, 2*per)
	}
}

// TestActorHeaderThatBreaksDisplayRefused: a Pawl-Actor header holding a
// control or an invisible format character (a zero width space, a tag
// character) is refused with InvalidArgument naming the character, with
// or without an auth file; nothing is written, and the record of the
// refusal names the caller's address, not the header.
func TestActorHeaderThatBreaksDisplayRefused(t *testing.T) {
	srv := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range []struct{ actor, says string }{
		{"ali\u200bce", "the Pawl-Actor header holds U+200B (zero width space) at byte 3"},
		{"bob\U000E0041", "the Pawl-Actor header holds U+E0041 (tag character) at byte 3"},
		{"eve\tx", "the Pawl-Actor header holds U+0009 (tab) at byte 3"},
		{strings.Repeat("a", 257), "the Pawl-Actor header is 257 bytes"},
	} {
		cl := &calls{actor: c.actor, ids: map[string][]string{}}
		kv := pawlv1connect.NewKVServiceClient(testserver.HTTPClient(t), srv.URL, connect.WithInterceptors(cl))
		_, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "/app/a", Value: []byte("1")}))
		wantCode(t, "Put", err, connect.CodeInvalidArgument, c.says, "without control or format characters")
		plain := pawlv1connect.NewKVServiceClient(testserver.HTTPClient(t), srv.URL)
		if _, err := plain.Get(ctx, connect.NewRequest(&pawlv1.GetRequest{Key: "/app/a"})); connect.CodeOf(err) != connect.CodeNotFound {
			t.Fatalf("Get after a refused Put: %v", err)
		}
		records := auditRecords(t, ctx, pawlv1connect.NewAuditServiceClient(testserver.HTTPClient(t), srv.URL), 100)
		rec, ok := records[cl.ids[pawlv1connect.KVServicePutProcedure][0]]
		if !ok || rec.Principal == "" || strings.Contains(rec.Principal, c.actor[:3]) {
			t.Errorf("the record of the refused Put: %+v (recorded %v)", rec, ok)
		}
	}
	f := newAuthFixture(t)
	req := connect.NewRequest(&pawlv1.GetRequest{Key: "/app/a"})
	req.Header().Set("Pawl-Actor", "ali\u200bce")
	_, err := f.as("admin").kv.Get(f.ctx, req)
	wantCode(t, "Get with an auth file", err, connect.CodeInvalidArgument, "U+200B (zero width space) at byte 3")
}
