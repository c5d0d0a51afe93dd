package server_test

import (
	"context"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
)

// TestEveryStatusPageIsReadAtTheRevisionOfTheFirst: a status is read in
// pages of its ACKs; a stop and more ACKs land between the pages. Every
// later page still says what the first said (the stages, the release's
// state, no stop record), and its ACKs are those of that revision.
func TestEveryStatusPageIsReadAtTheRevisionOfTheFirst(t *testing.T) {
	srv := testserver.Start(t)
	ctx := context.Background()
	c := newCanaryRollout(t, ctx, srv)
	ids := []string{"c1", "c2", "c3"}
	for _, id := range ids {
		register(t, c.is, id, "b", "zone-a", map[string]string{"canary": "true"})
	}
	register(t, c.is, "w1", "b", "zone-a", nil) // the stage after the canary takes it
	rel := c.create(70)
	for _, id := range ids {
		c.ack(rel, id)
	}
	page := func(token string) *pawlv1.GetRolloutStatusResponse {
		t.Helper()
		resp, err := c.ro.GetRolloutStatus(ctx, connect.NewRequest(&pawlv1.GetRolloutStatusRequest{ConfigId: "routing", Generation: rel.GetGeneration(),
			AckPageSize: 1, AckPageToken: token}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg
	}
	first := page("")
	if first.GetState() != pawlv1.ReleaseState_RELEASE_STATE_CANDIDATE || first.GetStop() != nil || len(first.GetAcks()) != 1 {
		t.Fatalf("first page: state %v, stop %v, %d ACKs", first.GetState(), first.GetStop(), len(first.GetAcks()))
	}
	if _, err := c.ro.StopRollout(ctx, connect.NewRequest(&pawlv1.StopRolloutRequest{ConfigId: "routing", Generation: rel.GetGeneration(), Reason: "between pages"})); err != nil {
		t.Fatal(err)
	}
	c.ack(rel, "c1") // a late ACK, after the stop: not in the pages of the first's revision
	acks := len(first.GetAcks())
	for token := first.GetNextAckPageToken(); token != ""; {
		next := page(token)
		acks += len(next.GetAcks())
		if next.GetState() != first.GetState() || next.GetStop() != nil || !proto.Equal(next.GetCoverage(), first.GetCoverage()) ||
			len(next.GetStages()) != len(first.GetStages()) {
			t.Fatalf("a later page says state %v, stop %v, coverage %v; the first said %v, %v, %v", next.GetState(), next.GetStop(), next.GetCoverage(),
				first.GetState(), first.GetStop(), first.GetCoverage())
		}
		for i := range first.GetStages() {
			if !proto.Equal(next.GetStages()[i], first.GetStages()[i]) {
				t.Fatalf("stage %d on a later page: %v; on the first: %v", i, next.GetStages()[i], first.GetStages()[i])
			}
		}
		token = next.GetNextAckPageToken()
	}
	if acks != len(ids) {
		t.Fatalf("the pages hold %d ACKs; %d were sent before the first", acks, len(ids))
	}
	// A new status (no token) sees the stop.
	if now := page(""); now.GetState() != pawlv1.ReleaseState_RELEASE_STATE_STOPPED || now.GetStop() == nil {
		t.Fatalf("a new status after the stop: state %v, stop %v", now.GetState(), now.GetStop())
	}
}
