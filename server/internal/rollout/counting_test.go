package rollout_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pawlcfg/pawl/server/internal/quorum"
	"github.com/pawlcfg/pawl/server/internal/release"
	"github.com/pawlcfg/pawl/server/internal/rollout"
)

func (e *env) status(t *testing.T, gen int64) rollout.Status {
	t.Helper()
	st, err := e.rollouts.Status(context.Background(), "routing", gen)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestARestartResetsWhatCounts: an instance's apply sequence is per boot,
// so after a restart its old boot's HEALTHY_ACKED (at sequence 3) must not
// keep counting, and the new boot's REJECTED at sequence 1 must not hide
// behind it. (Before the fix the tally kept the highest sequence across
// boots: 1 healthy, 0 rejected.)
func TestARestartResetsWhatCounts(t *testing.T) {
	e := newEnv(t)
	rel := e.releaseWith(t, 50, func(s *release.Spec) {
		s.Stages[0].Policy.MaxRejected = 1 // the rejection must not stop the rollout: its tally is what is read
	})
	e.ack(t, rel, "i0", "boot-1", 3, rollout.HealthyAcked)
	if ev := e.status(t, 1).Stages[0].Evaluation; ev.Healthy != 1 {
		t.Fatalf("before the restart: %+v", ev)
	}
	e.register(t, "i0", "boot-2", "zone-a")
	st := e.status(t, 1)
	if ev := st.Stages[0].Evaluation; ev.Healthy != 0 || st.Stages[0].States["NO_ACK"] != 6 {
		t.Fatalf("after the restart the old boot still counts: %+v, states %v", ev, st.Stages[0].States)
	}
	if a := e.ack(t, rel, "i0", "boot-2", 1, rollout.Rejected); !a.Counted {
		t.Fatalf("the new boot's rejection = %+v", a)
	}
	if ev := e.status(t, 1).Stages[0].Evaluation; ev.Rejected != 1 || ev.Healthy != 0 {
		t.Fatalf("the new boot's rejection is hidden: %+v", ev)
	}
	// A registration again with the same boot (its lease lapsed) is a new
	// membership epoch: the earlier registration's ACKs stop counting too.
	e.ack(t, rel, "i1", "boot-1", 1, rollout.HealthyAcked)
	e.register(t, "i1", "boot-1", "zone-b")
	if ev := e.status(t, 1).Stages[0].Evaluation; ev.Healthy != 0 {
		t.Fatalf("the earlier registration's ACK still counts: %+v", ev)
	}
	if a := e.ack(t, rel, "i1", "boot-1", 1, rollout.HealthyAcked); !a.Counted {
		t.Fatalf("the same report from the new registration = %+v", a)
	}
	if ev := e.status(t, 1).Stages[0].Evaluation; ev.Healthy != 1 {
		t.Fatalf("after the new registration reported: %+v", ev)
	}
}

// TestAnUnhealthyReportAfterTheWindowCounts: an error spike after the
// health window, reported as HEALTHY_ACKED with health_ok false at the same
// apply sequence as the healthy report, counts at once as a rejection, and
// stands. (Before the fix it was judged a duplicate.)
func TestAnUnhealthyReportAfterTheWindowCounts(t *testing.T) {
	e := newEnv(t)
	rel := e.releaseWith(t, 50, func(s *release.Spec) {
		s.HealthWindow = time.Minute
		s.Stages[0].Policy.MaxRejected = 1
	})
	e.ack(t, rel, "i0", "boot-1", 1, rollout.Applied)
	e.clock.Advance(time.Minute)
	if a := e.ack(t, rel, "i0", "boot-1", 1, rollout.HealthyAcked); !a.Counted {
		t.Fatalf("healthy after the window = %+v", a)
	}
	e.clock.Advance(10 * time.Minute)
	unhealthy := func(a *rollout.Ack) { a.HealthOK = false }
	if a := e.ack(t, rel, "i0", "boot-1", 1, rollout.HealthyAcked, unhealthy); !a.Counted {
		t.Fatalf("unhealthy after the window = %+v", a)
	}
	st := e.status(t, 1)
	if ev := st.Stages[0].Evaluation; ev.Rejected != 1 || ev.Healthy != 0 || st.Stages[0].States["UNHEALTHY"] != 1 {
		t.Fatalf("status after the spike: %+v %v", ev, st.Stages[0].States)
	}
	if a := e.ack(t, rel, "i0", "boot-1", 1, rollout.HealthyAcked, unhealthy); a.Counted || !strings.HasPrefix(a.Why, "duplicate:") {
		t.Fatalf("the same unhealthy report again = %+v", a)
	}
	// The failure stands until the instance applies again.
	if a := e.ack(t, rel, "i0", "boot-1", 1, rollout.HealthyAcked); a.Counted || !strings.Contains(a.Why, "a failure stands") {
		t.Fatalf("healthy again at the same apply sequence = %+v", a)
	}
	e.ack(t, rel, "i0", "boot-1", 2, rollout.Applied)
	e.clock.Advance(time.Minute)
	if a := e.ack(t, rel, "i0", "boot-1", 2, rollout.HealthyAcked); !a.Counted {
		t.Fatalf("healthy after a new apply = %+v", a)
	}
	if ev := e.status(t, 1).Stages[0].Evaluation; ev.Rejected != 0 || ev.Healthy != 1 {
		t.Fatalf("after the new apply: %+v", ev)
	}
	// Reports of an apply go forward: APPLIED after HEALTHY_ACKED of the
	// same sequence is out of order.
	if a := e.ack(t, rel, "i0", "boot-1", 2, rollout.Applied); a.Counted || !strings.Contains(a.Why, "out of order: APPLIED after HEALTHY_ACKED") {
		t.Fatalf("APPLIED after HEALTHY_ACKED = %+v", a)
	}
}

// TestARolledBackGenerationsEvidenceIsFrozen: after a rollback from 2 to 1,
// ACKs of 2 are late, however new their apply sequence. (Before the fix
// they counted again, since the pointer was below 2.)
func TestARolledBackGenerationsEvidenceIsFrozen(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	g1 := e.promoted(t, 10)
	g2 := e.promoted(t, 20)
	if _, err := e.rollouts.Rollback(ctx, rollout.Move{ConfigID: "routing", ExpectedGeneration: 2, IdempotencyKey: "rb"}); err != nil {
		t.Fatal(err)
	}
	before := e.status(t, 2).Stages[0].Evaluation
	if a := e.ack(t, g2, "i0", "boot-1", 9, rollout.HealthyAcked, func(a *rollout.Ack) { a.HealthOK = false }); a.Counted ||
		!strings.Contains(a.Why, "late: generation 2 is no longer active") {
		t.Fatalf("ACK of the rolled-back generation = %+v", a)
	}
	if after := e.status(t, 2).Stages[0].Evaluation; after.Healthy != before.Healthy || after.Rejected != 0 {
		t.Fatalf("the rolled-back generation's tally moved: %+v -> %+v", before, after)
	}
	// Generation 1 is active again: its ACKs are its health and count.
	if a := e.ack(t, g1, "i0", "boot-1", 10, rollout.HealthyAcked); !a.Counted {
		t.Fatalf("ACK of the active generation = %+v", a)
	}
	// A candidate superseded by a newer release before promotion is over
	// as well.
	g3 := e.release(t, 30)
	e.release(t, 40)
	if a := e.ack(t, g3, "i0", "boot-1", 11, rollout.HealthyAcked); a.Counted || !strings.Contains(a.Why, "superseded by generation 4") {
		t.Fatalf("ACK of a superseded candidate = %+v", a)
	}
	if _, err := e.rollouts.Promote(ctx, rollout.Move{ConfigID: "routing", To: 3, ExpectedGeneration: 1, ExpectedEpoch: 1, IdempotencyKey: "p3"}); !errors.Is(err, rollout.ErrNotReady) ||
		!strings.Contains(err.Error(), "superseded by generation 4") {
		t.Fatalf("Promote of a superseded candidate = %v", err)
	}
}

// TestOnlyAssignedInstancesCount: a candidate's ACK counts only from an
// instance one of its reached stages took. Before the canary cohort
// passes, everyone else's ACK is kept with the reason; after, the next
// stage's instances count.
func TestOnlyAssignedInstancesCount(t *testing.T) {
	e := newEnv(t)
	rel := e.releaseWith(t, 50, func(s *release.Spec) {
		s.Stages = []release.Stage{
			{Name: "canary", Selector: map[string]string{"zone": "zone-a"}, Policy: quorum.Policy{Kind: quorum.Fraction, Fraction: 0.5}},
			{Name: "rest", Policy: quorum.Policy{Kind: quorum.All}},
		}
	})
	cohort := rollout.Cohort(rel, 0) // one of i0 and i3 (zone-a)
	var canary, other string
	for _, id := range []string{"i0", "i3"} {
		if cohort[id] {
			canary = id
		} else {
			other = id
		}
	}
	if canary == "" || other == "" {
		t.Fatalf("cohort = %v", cohort)
	}
	if a := e.ack(t, rel, other, "boot-1", 1, rollout.HealthyAcked); a.Counted || !strings.Contains(a.Why, `stage "rest", which the rollout has not reached`) {
		t.Fatalf("ACK of the zone-a instance outside the cohort = %+v", a)
	}
	if a := e.ack(t, rel, "i1", "boot-1", 1, rollout.HealthyAcked); a.Counted || !strings.Contains(a.Why, "not assigned") {
		t.Fatalf("ACK of a rest instance before the canary passed = %+v", a)
	}
	if a := e.ack(t, rel, canary, "boot-1", 1, rollout.HealthyAcked); !a.Counted {
		t.Fatalf("canary ACK = %+v", a)
	}
	// The canary's ACK passed its stage, and Settle recorded it: the rest
	// are assigned now, and count.
	st := e.status(t, 1)
	if !st.Stages[1].Reached || st.Stages[0].PassedAt.IsZero() || len(st.Progress.Passed) != 1 {
		t.Fatalf("after the canary passed: %+v", st.Stages)
	}
	if a := e.ack(t, rel, "i1", "boot-1", 2, rollout.HealthyAcked); !a.Counted {
		t.Fatalf("ACK of a rest instance after the canary passed = %+v", a)
	}
}

// TestAStageOncePassedStaysReached: a canary that restarts after its stage
// passed makes the stage wait again (its old boot no longer counts), but
// the instances of the next stage keep their assignment: progress only
// grows.
func TestAStageOncePassedStaysReached(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.promoted(t, 10)
	rel := e.releaseWith(t, 50, func(s *release.Spec) {
		s.Stages = []release.Stage{
			{Name: "canary", Selector: map[string]string{"zone": "zone-a"}, Policy: quorum.Policy{Kind: quorum.All}},
			{Name: "rest", Policy: quorum.Policy{Kind: quorum.All}},
		}
	})
	e.ack(t, rel, "i0", "boot-1", 2, rollout.HealthyAcked)
	e.ack(t, rel, "i3", "boot-1", 2, rollout.HealthyAcked)
	assigned := func(id string) int64 {
		t.Helper()
		as, _, err := e.rollouts.Assignments(ctx, id)
		if err != nil || len(as) != 1 {
			t.Fatalf("assignments of %s = %+v, %v", id, as, err)
		}
		return as[0].Generation
	}
	if g := assigned("i1"); g != 2 {
		t.Fatalf("i1 after the canary passed runs %d", g)
	}
	e.register(t, "i0", "boot-2", "zone-a") // the canary restarts
	st := e.status(t, 2)
	if st.Stages[0].Evaluation.Outcome != quorum.Waiting || !st.Stages[1].Reached {
		t.Fatalf("after the canary's restart: %+v", st.Stages)
	}
	if g := assigned("i1"); g != 2 {
		t.Fatalf("i1 lost its assignment when the canary restarted: runs %d", g)
	}
	// Promotion needs every stage passing now: the restarted canary must
	// report again first.
	if _, err := e.rollouts.Promote(ctx, rollout.Move{ConfigID: "routing", To: 2, ExpectedGeneration: 1, IdempotencyKey: "p2"}); !errors.Is(err, rollout.ErrNotReady) {
		t.Fatalf("Promote with the canary restarted = %v", err)
	}
}

// TestAnIdempotencyKeyReusedForAnotherRequestIsRefused: a retry gets the
// receipt; the key sent with another generation or as a rollback is
// refused, naming what the key was used for. (Before the fix the old
// receipt came back as if the new request had succeeded.)
func TestAnIdempotencyKeyReusedForAnotherRequestIsRefused(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	g1 := e.release(t, 10)
	ackAll(t, e, g1)
	move := rollout.Move{ConfigID: "routing", To: 1, IdempotencyKey: "k1", Actor: "alice"}
	rc, err := e.rollouts.Promote(ctx, move)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := e.rollouts.Promote(ctx, move); err != nil || again.Revision != rc.Revision {
		t.Fatalf("retry = %+v, %v", again, err)
	}
	g2 := e.release(t, 20)
	ackAll(t, e, g2)
	for name, fn := range map[string]func() error{
		"another generation": func() error {
			_, err := e.rollouts.Promote(ctx, rollout.Move{ConfigID: "routing", To: 2, ExpectedGeneration: 1, IdempotencyKey: "k1"})
			return err
		},
		"a rollback": func() error {
			_, err := e.rollouts.Rollback(ctx, rollout.Move{ConfigID: "routing", ExpectedGeneration: 1, IdempotencyKey: "k1"})
			return err
		},
	} {
		err := fn()
		if !errors.Is(err, rollout.ErrKeyReused) || !strings.Contains(err.Error(), "a promotion from generation 0 to 1 at epoch 0 (by alice") {
			t.Errorf("key k1 reused for %s = %v", name, err)
		}
	}
	if ptr, _ := e.rollouts.Pointer(ctx, "routing"); ptr.Generation != 1 {
		t.Fatalf("a refused request moved the pointer: %+v", ptr)
	}
	// A retry that read the pointer its first attempt moved is the same
	// request: it gets the receipt.
	if again, err := e.rollouts.Promote(ctx, rollout.Move{ConfigID: "routing", To: 1, ExpectedGeneration: 1, IdempotencyKey: "k1"}); err != nil || again.Revision != rc.Revision {
		t.Fatalf("retry after the move = %+v, %v", again, err)
	}
	rb := rollout.Move{ConfigID: "routing", ExpectedGeneration: 1, IdempotencyKey: "rb"}
	if _, err := e.rollouts.Promote(ctx, rollout.Move{ConfigID: "routing", To: 2, ExpectedGeneration: 1, IdempotencyKey: "k2"}); err != nil {
		t.Fatal(err)
	}
	rb.ExpectedGeneration = 2
	first, err := e.rollouts.Rollback(ctx, rb)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := e.rollouts.Rollback(ctx, rb); err != nil || again.Revision != first.Revision {
		t.Fatalf("retried rollback = %+v, %v", again, err)
	}
	if _, err := e.rollouts.Promote(ctx, rollout.Move{ConfigID: "routing", To: 3, ExpectedGeneration: 1, ExpectedEpoch: 1, IdempotencyKey: "rb"}); !errors.Is(err, rollout.ErrKeyReused) ||
		!strings.Contains(err.Error(), "a rollback from generation 2 to 1") {
		t.Fatalf("rollback key reused for a promotion = %v", err)
	}
}
