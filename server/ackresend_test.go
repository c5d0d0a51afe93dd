package server_test

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/faultproxy"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/server/internal/records"
	"github.com/pawlcfg/pawl/server/internal/rollout"
	"github.com/pawlcfg/pawl/server/internal/store"
)

// TestAnAckSentAgainAfterItsAnswerWasLost: pawld records an ACK and its
// answer is lost on the way back (a proxy drops it); the instance sends
// the same report again with its report ID and gets the first answer:
// one record in the store, counted once, with the time it first arrived.
// The same report without an ID would have been a duplicate.
func TestAnAckSentAgainAfterItsAnswerWasLost(t *testing.T) {
	srv := testserver.Start(t)
	ctx := context.Background()
	is := pawlv1connect.NewInstanceServiceClient(testserver.HTTPClient(t), srv.URL)
	kv := pawlv1connect.NewKVServiceClient(testserver.HTTPClient(t), srv.URL)
	register(t, is, "pay-1", "boot-a", "zone-a", map[string]string{"env": "prod"})
	rel := windowRelease(t, srv, nil)
	loser := faultproxy.NewLoser(t, srv.URL)
	ro := pawlv1connect.NewRolloutServiceClient(testserver.HTTP1Client(t), loser.URL)
	ack := &pawlv1.Ack{
		ConfigId: rel.GetSpec().GetConfigId(), Generation: rel.GetGeneration(), WorkloadIdentity: "pay-1", BootId: "boot-a",
		MembershipEpoch: epochOf(t, is, "pay-1"), ContentDigest: rel.GetContentDigest(), ValidatorDigest: rel.GetSpec().GetValidatorDigest(),
		ApplySequence: 1, State: pawlv1.InstanceState_INSTANCE_STATE_APPLIED, HealthOk: true, ReportId: 42,
	}
	loser.LoseNext("/Ack", 1)
	if _, err := ro.Ack(ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: ack})); err == nil || loser.Lost("/Ack") != 1 {
		t.Fatalf("ACK with its answer lost = %v (%d lost)", err, loser.Lost("/Ack"))
	}
	stored := func() []*pawlv1.KeyValue {
		t.Helper()
		list, err := kv.List(ctx, connect.NewRequest(&pawlv1.ListRequest{Prefix: records.AcksOf(ack.ConfigId, ack.Generation, "pay-1"), PageSize: 100}))
		if err != nil {
			t.Fatal(err)
		}
		return list.Msg.GetKvs()
	}
	if n := len(stored()); n != 1 {
		t.Fatalf("the ACK whose answer was lost left %d records; want 1", n)
	}
	resp, err := ro.Ack(ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: ack}))
	if err != nil {
		t.Fatal(err)
	}
	got := resp.Msg.GetAck()
	if !got.GetCounted() || got.GetNotCountedReason() != "" || got.GetReportId() != 42 {
		t.Fatalf("the report sent again = %v; want the first answer: counted", got)
	}
	kvs := stored()
	if len(kvs) != 1 {
		t.Fatalf("after the report was sent again the store holds %d of its ACKs; want 1", len(kvs))
	}
	var first rollout.Ack
	if err := records.Decode(store.KeyValue{Key: kvs[0].GetKey(), Value: kvs[0].GetValue()}, &first); err != nil {
		t.Fatal(err)
	}
	if !got.GetReceivedAt().AsTime().Equal(first.ReceivedAt) || !first.Counted || first.ReportID != 42 {
		t.Fatalf("answer received at %v, the record %+v: want the record's", got.GetReceivedAt().AsTime(), first)
	}
	// Without its ID, the same report is judged again: a duplicate.
	ack.ReportId = 0
	resp, err = ro.Ack(ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: ack}))
	if err != nil || resp.Msg.GetAck().GetCounted() {
		t.Fatalf("the report without its ID = %v, %v; want a duplicate", resp.Msg.GetAck(), err)
	}
}
