package server_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/server"
)

// TestAPlainWriteStallsNoRolloutCall: writes outside /_pawl/ move the
// store's revision without giving the rollout views an event. Every
// rollout call reads the views at the store's revision, so each must
// still answer after such a write. The hub's progress notices come once an
// hour here: a view that learnt the revision only from them would leave
// each call waiting until the test's deadline, which fails it.
func TestAPlainWriteStallsNoRolloutCall(t *testing.T) {
	dir := t.TempDir()
	srv := testserver.StartIn(t, dir, server.WithProgressInterval(time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kv := newKV(t, srv)
	c := newCanaryRollout(t, ctx, srv)
	register(t, c.is, "canary-1", "b", "zone-a", map[string]string{"canary": "true"})
	register(t, c.is, "canary-2", "b", "zone-a", map[string]string{"canary": "true"})
	register(t, c.is, "worker-1", "b", "zone-a", nil) // the stage after the canary takes it
	unrelated := 0
	write := func() {
		unrelated++
		put(t, kv, fmt.Sprintf("/app/x%d", unrelated), "1")
	}
	// call runs one rollout RPC right after a plain write, with a deadline
	// far below the hour the progress notice would take.
	call := func(what string, fn func(ctx context.Context) error) {
		t.Helper()
		write()
		cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
		defer ccancel()
		if err := fn(cctx); err != nil {
			t.Fatalf("%s after a plain write: %v", what, err)
		}
	}

	rel := c.create(70)
	call("Ack", func(ctx context.Context) error {
		_, err := c.ro.Ack(ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: &pawlv1.Ack{
			ConfigId: "routing", Generation: 1, WorkloadIdentity: "canary-1", BootId: "b", ApplySequence: 1,
			MembershipEpoch: epochOf(t, c.is, "canary-1"), ContentDigest: rel.GetContentDigest(), ValidatorDigest: c.digest,
			State: pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED, HealthOk: true,
		}}))
		return err
	})
	c.ack(rel, "canary-2")
	c.ack(rel, "worker-1")
	call("GetRolloutStatus", func(ctx context.Context) error {
		resp, err := c.ro.GetRolloutStatus(ctx, connect.NewRequest(&pawlv1.GetRolloutStatusRequest{ConfigId: "routing", Generation: 1}))
		if err == nil && len(resp.Msg.GetAcks()) != 3 {
			return fmt.Errorf("status of release 1 shows %d ACKs, want 3", len(resp.Msg.GetAcks()))
		}
		return err
	})
	call("WatchAssignments", func(ctx context.Context) error {
		s, err := c.is.WatchAssignments(ctx, connect.NewRequest(&pawlv1.WatchAssignmentsRequest{WorkloadIdentity: "canary-1"}))
		if err != nil {
			return err
		}
		defer s.Close()
		if !s.Receive() {
			return fmt.Errorf("no first message: %w", s.Err())
		}
		return nil
	})
	call("Promote", func(ctx context.Context) error {
		_, err := c.ro.Promote(ctx, connect.NewRequest(&pawlv1.PromoteRequest{ConfigId: "routing", Generation: 1, IdempotencyKey: "p1"}))
		return err
	})
	call("GetPromotion", func(ctx context.Context) error {
		_, err := c.ro.GetPromotion(ctx, connect.NewRequest(&pawlv1.GetPromotionRequest{ConfigId: "routing", IdempotencyKey: "p1"}))
		return err
	})
	call("GetPointer", func(ctx context.Context) error {
		_, err := c.ro.GetPointer(ctx, connect.NewRequest(&pawlv1.GetPointerRequest{ConfigId: "routing"}))
		return err
	})
	call("ListApplied", func(ctx context.Context) error {
		_, err := c.ro.ListApplied(ctx, connect.NewRequest(&pawlv1.ListAppliedRequest{ConfigId: "routing"}))
		return err
	})
	c.create(60)
	call("RetireMember", func(ctx context.Context) error {
		_, err := c.rs.RetireMember(ctx, connect.NewRequest(&pawlv1.RetireMemberRequest{ConfigId: "routing", Generation: 2,
			WorkloadIdentity: "canary-2", Reason: "decommissioned"}))
		return err
	})
	call("StopRollout", func(ctx context.Context) error {
		_, err := c.ro.StopRollout(ctx, connect.NewRequest(&pawlv1.StopRolloutRequest{ConfigId: "routing", Generation: 2, Reason: "test"}))
		return err
	})
	call("RevokeRelease", func(ctx context.Context) error {
		_, err := c.rs.RevokeRelease(ctx, connect.NewRequest(&pawlv1.RevokeReleaseRequest{ConfigId: "routing", Generation: 2, Reason: "test"}))
		return err
	})
	rel = c.create(40) // generation 3
	c.ack(rel, "canary-1")
	c.ack(rel, "canary-2")
	c.ack(rel, "worker-1")
	var ptr *pawlv1.Pointer
	call("GetPointer", func(ctx context.Context) error {
		resp, err := c.ro.GetPointer(ctx, connect.NewRequest(&pawlv1.GetPointerRequest{ConfigId: "routing"}))
		if err != nil {
			return err
		}
		ptr = resp.Msg.GetPointer()
		return nil
	})
	call("Promote", func(ctx context.Context) error {
		resp, err := c.ro.Promote(ctx, connect.NewRequest(&pawlv1.PromoteRequest{ConfigId: "routing", Generation: 3,
			ExpectedGeneration: ptr.GetGeneration(), ExpectedEpoch: ptr.GetEpoch(), IdempotencyKey: "p3"}))
		if err != nil {
			return err
		}
		ptr = &pawlv1.Pointer{Generation: 3, Epoch: resp.Msg.GetReceipt().GetEpoch()}
		return nil
	})
	call("Rollback", func(ctx context.Context) error {
		_, err := c.ro.Rollback(ctx, connect.NewRequest(&pawlv1.RollbackRequest{ConfigId: "routing",
			ExpectedGeneration: 3, ExpectedEpoch: ptr.GetEpoch(), IdempotencyKey: "r1"}))
		return err
	})

	// After a restart the views start from a snapshot; plain writes then
	// stall them no more than before.
	srv.Stop()
	srv = testserver.StartIn(t, dir, server.WithProgressInterval(time.Hour))
	kv = newKV(t, srv)
	c = newCanaryRollout(t, ctx, srv)
	call("GetRolloutStatus after a restart", func(ctx context.Context) error {
		_, err := c.ro.GetRolloutStatus(ctx, connect.NewRequest(&pawlv1.GetRolloutStatusRequest{ConfigId: "routing", Generation: 3}))
		return err
	})
}
