package sdk_test

import (
	"strings"
	"testing"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
)

// lastAckOf returns id's last ACK of routing generation gen.
func (h *harness) lastAckOf(gen int64, id string) *pawlv1.Ack {
	h.t.Helper()
	_, acks := h.acks(gen)
	for i := len(acks) - 1; i >= 0; i-- {
		if acks[i].GetWorkloadIdentity() == id {
			return acks[i]
		}
	}
	h.t.Fatalf("%s reported nothing for generation %d", id, gen)
	return nil
}

// TestAnInstanceReportsStaleWhenItsAssignmentMovesPast: once an instance
// applied the generation its assignment moved to, it reports STALE for
// the one it ran before, at that apply's sequence: for the active
// generation when a canary takes it to the next (it counts, and status
// shows the member STALE), and for the canary's generation after a
// rollback (kept with its reason: that rollout is over).
func TestAnInstanceReportsStaleWhenItsAssignmentMovesPast(t *testing.T) {
	h := newHarness(t)
	h.client("svc-1")
	h.waitRegistered("svc-1")
	healthy := func(gen int64) {
		h.awaitAcks(gen, func(s map[string][]string) bool { return reported(s, "svc-1", "HEALTHY_ACKED") })
	}
	stale := func(gen int64) *pawlv1.Ack {
		h.awaitAcks(gen, func(s map[string][]string) bool { return reported(s, "svc-1", "STALE") })
		return h.lastAckOf(gen, "svc-1")
	}
	h.release(50, nil)
	healthy(1)
	applied1 := h.lastAckOf(1, "svc-1").GetApplySequence()
	h.promote(1)
	h.release(60, nil)
	healthy(2)
	applied2 := h.lastAckOf(2, "svc-1").GetApplySequence()

	a := stale(1)
	if !a.GetCounted() || a.GetApplySequence() != applied1 || !strings.Contains(a.GetReason(), "moved past generation 1: generation 2 is applied") {
		t.Fatalf("STALE of generation 1 = %v: want it counted, at apply sequence %d", a, applied1)
	}
	if states := h.status(1).GetStages()[0].GetStates(); states["STALE"] != 1 {
		t.Fatalf("generation 1's stage states = %v: want the member STALE", states)
	}

	h.promote(2)
	if _, err := h.ro.Rollback(h.ctx, connect.NewRequest(&pawlv1.RollbackRequest{ConfigId: "routing", ExpectedGeneration: 2, ExpectedEpoch: 0, IdempotencyKey: "rb"})); err != nil {
		t.Fatal(err)
	}
	a = stale(2)
	if a.GetApplySequence() != applied2 || !strings.Contains(a.GetReason(), "moved past generation 2: generation 1 is applied") ||
		!strings.Contains(a.GetNotCountedReason(), "late: generation 2 is no longer active") {
		t.Fatalf("STALE of the rolled-back generation 2 = %v: want it kept at apply sequence %d, late", a, applied2)
	}
}
