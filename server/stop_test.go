package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/internal/testkit/testclock"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/server"
)

// TestADeadlineStopsTheRolloutAndCallsTheCanariesBack: a stage still
// waiting at the deadline fails with nobody asking; the stop record keeps
// the evidence, the instances that had the new generation are assigned the
// active one again, later ACKs do not count, and nothing promotes it.
func TestADeadlineStopsTheRolloutAndCallsTheCanariesBack(t *testing.T) {
	clock := testclock.New(time.Now())
	srv := testserver.Start(t, server.WithClock(clock.Now), server.WithRolloutCheckInterval(10*time.Millisecond), server.WithInstanceLease(24*time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newCanaryRollout(t, ctx, srv) // RolloutService over the Connect protocol
	is, rs, ro := c.is, c.rs, c.ro
	register(t, is, "canary-1", "b", "zone-a", map[string]string{"canary": "true"})
	register(t, is, "main-1", "b", "zone-b", nil)
	create, ack, watch := c.create, c.ack, c.watch
	rel1 := create(50)
	ack(rel1, "canary-1")
	ack(rel1, "main-1")
	if _, err := ro.Promote(ctx, connect.NewRequest(&pawlv1.PromoteRequest{ConfigId: "routing", Generation: 1, IdempotencyKey: "p1"})); err != nil {
		t.Fatal(err)
	}
	canary, main := watch("canary-1"), watch("main-1")
	for _, s := range []assignmentStream{canary, main} {
		if got := s.next(t); got != "routing@1 " {
			t.Fatalf("before generation 2: %q", got)
		}
	}

	rel2 := create(70)
	if got := canary.next(t); got != "routing@2:canary " {
		t.Fatalf("canary with generation 2 out: %q", got)
	}
	ack(rel2, "canary-1")
	if got := main.next(t); got != "routing@2:everyone " {
		t.Fatalf("main past the canary stage: %q", got)
	}
	// main-1 never ACKs. An hour and more passes; nobody asks for status.
	clock.Advance(61 * time.Minute)
	for name, s := range map[string]assignmentStream{"canary": canary, "main": main} {
		if got := s.next(t); got != "routing@1 " {
			t.Fatalf("%s after the deadline: %q", name, got)
		}
	}
	st, err := ro.GetRolloutStatus(ctx, connect.NewRequest(&pawlv1.GetRolloutStatusRequest{ConfigId: "routing", Generation: 2}))
	if err != nil {
		t.Fatal(err)
	}
	stop := st.Msg.GetStop()
	if st.Msg.GetState() != pawlv1.ReleaseState_RELEASE_STATE_STOPPED || stop.GetStage() != "everyone" || stop.GetManual() ||
		!strings.Contains(stop.GetReason(), "the deadline passed") || len(stop.GetEvidence()) != 2 || stop.GetEvidence()[0].GetHealthy() != 1 || stop.GetEvidence()[1].GetMembers() != 1 || stop.GetEvidence()[1].GetHealthy() != 0 {
		t.Fatalf("status after the deadline: state %v, stop %v", st.Msg.GetState(), stop)
	}
	if a := ack(rel2, "main-1"); a.GetCounted() || !strings.Contains(a.GetNotCountedReason(), "the rollout stopped") {
		t.Fatalf("ACK after the stop = %v", a)
	}
	_, err = ro.Promote(ctx, connect.NewRequest(&pawlv1.PromoteRequest{ConfigId: "routing", Generation: 2, ExpectedGeneration: 1, IdempotencyKey: "p2"}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "rollout stopped") {
		t.Fatalf("Promote of the stopped release = %v", err)
	}
	list, err := rs.ListReleases(ctx, connect.NewRequest(&pawlv1.ListReleasesRequest{ConfigId: "routing"}))
	if err != nil || len(list.Msg.GetReleases()) != 2 || list.Msg.GetReleases()[0].GetState() != pawlv1.ReleaseState_RELEASE_STATE_ACTIVE ||
		list.Msg.GetReleases()[1].GetState() != pawlv1.ReleaseState_RELEASE_STATE_STOPPED {
		t.Fatalf("releases = %v, %v", list, err)
	}

	// An operator stops generation 3 by hand.
	rel3 := create(90)
	if got := canary.next(t); got != "routing@3:canary " {
		t.Fatalf("canary with generation 3 out: %q", got)
	}
	stopReq := func(gen int64, reason string) (*connect.Response[pawlv1.StopRolloutResponse], error) {
		req := connect.NewRequest(&pawlv1.StopRolloutRequest{ConfigId: "routing", Generation: gen, Reason: reason})
		req.Header().Set("Pawl-Actor", "oncall")
		return ro.StopRollout(ctx, req)
	}
	if _, err := stopReq(3, ""); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("stop without a reason = %v", err)
	}
	if _, err := stopReq(2, "again"); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("stop of a stopped rollout = %v", err)
	}
	if _, err := stopReq(1, "active"); connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "roll back instead") {
		t.Fatalf("stop of the active release = %v", err)
	}
	if _, err := stopReq(7, "missing"); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("stop of a missing release = %v", err)
	}
	resp, err := stopReq(rel3.GetGeneration(), "error rate up on the canary")
	if err != nil || !resp.Msg.GetStop().GetManual() || resp.Msg.GetStop().GetActor() != "oncall" {
		t.Fatalf("StopRollout = %v, %v", resp, err)
	}
	if got := canary.next(t); got != "routing@1 " {
		t.Fatalf("canary after the manual stop: %q", got)
	}
}
