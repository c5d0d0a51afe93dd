package rollout_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pawlcfg/pawl/server/internal/instance"
	"github.com/pawlcfg/pawl/server/internal/quorum"
	"github.com/pawlcfg/pawl/server/internal/release"
	"github.com/pawlcfg/pawl/server/internal/rollout"
	"github.com/pawlcfg/pawl/server/internal/store"
	"github.com/pawlcfg/pawl/server/internal/watch"
)

func TestHealthyCountsOnlyAfterTheHealthWindow(t *testing.T) {
	e := newEnv(t)
	rel := e.releaseWith(t, 50, func(s *release.Spec) { s.HealthWindow = time.Minute })
	if a := e.ack(t, rel, "i0", "boot-1", 1, rollout.HealthyAcked); a.Counted || !strings.Contains(a.Why, "no APPLIED ACK of boot boot-1 at apply sequence 1") {
		t.Fatalf("HEALTHY_ACKED without APPLIED = %+v", a)
	}
	if a := e.ack(t, rel, "i0", "boot-1", 1, rollout.Applied); !a.Counted {
		t.Fatalf("APPLIED = %+v", a)
	}
	e.clock.Advance(30 * time.Second)
	if a := e.ack(t, rel, "i0", "boot-1", 1, rollout.HealthyAcked); a.Counted || !strings.Contains(a.Why, "healthy 30s after APPLIED, but the release's health window is 1m0s") {
		t.Fatalf("HEALTHY_ACKED inside the window = %+v", a)
	}
	// An APPLIED of another boot does not start this boot's window.
	if a := e.ack(t, rel, "i1", "boot-1", 1, rollout.Applied); !a.Counted {
		t.Fatalf("APPLIED of i1 = %+v", a)
	}
	e.clock.Advance(31 * time.Second)
	if a := e.ack(t, rel, "i0", "boot-1", 1, rollout.HealthyAcked); !a.Counted {
		t.Fatalf("HEALTHY_ACKED after the window = %+v", a)
	}
	// A failure counts at once: it needs no window.
	if a := e.ack(t, rel, "i2", "boot-1", 1, rollout.Rejected); !a.Counted {
		t.Fatalf("REJECTED = %+v", a)
	}
	st, err := e.rollouts.Status(context.Background(), "routing", 1)
	if err != nil || st.Stages[0].Evaluation.Healthy != 1 || st.Stages[0].Evaluation.Rejected != 1 {
		t.Fatalf("status = %+v, %v", st.Stages, err)
	}
}

func TestAnOperatorStopsARollout(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	rel := e.release(t, 50)
	e.ack(t, rel, "i0", "boot-1", 1, rollout.HealthyAcked)
	if _, err := e.rollouts.StopRollout(ctx, "routing", 1, "", "oncall"); !errors.Is(err, rollout.ErrInvalid) {
		t.Fatalf("stop without a reason = %v", err)
	}
	if _, err := e.rollouts.StopRollout(ctx, "routing", 9, "why", "oncall"); !errors.Is(err, release.ErrNotFound) {
		t.Fatalf("stop of a missing release = %v", err)
	}
	stop, err := e.rollouts.StopRollout(ctx, "routing", 1, "latency alarms in zone-a", "oncall")
	if err != nil || !stop.Manual || stop.Actor != "oncall" || stop.Reason != "latency alarms in zone-a" || stop.Evidence[0].Healthy != 1 {
		t.Fatalf("StopRollout = %+v, %v", stop, err)
	}
	if _, err := e.rollouts.StopRollout(ctx, "routing", 1, "again", "oncall"); !errors.Is(err, rollout.ErrNotReady) || !strings.Contains(err.Error(), "already stopped") {
		t.Fatalf("second stop = %v", err)
	}
	ackAll(t, e, rel)
	if _, err := e.rollouts.Promote(ctx, rollout.Move{ConfigID: "routing", To: 1, IdempotencyKey: "p"}); !errors.Is(err, rollout.ErrNotReady) {
		t.Fatalf("Promote after a manual stop = %v", err)
	}
	// A promoted release cannot be stopped: it is rolled back instead.
	next := e.release(t, 60)
	ackAll(t, e, next)
	if _, err := e.rollouts.Promote(ctx, rollout.Move{ConfigID: "routing", To: 2, IdempotencyKey: "p2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.rollouts.StopRollout(ctx, "routing", 2, "too late", "oncall"); !errors.Is(err, rollout.ErrNotReady) || !strings.Contains(err.Error(), "roll back instead") {
		t.Fatalf("stop of the active release = %v", err)
	}
	if s1, s2 := e.state(t, rel), e.state(t, next); s1 != rollout.StateStopped || s2 != rollout.StateActive {
		t.Fatalf("states = %s, %s", s1, s2)
	}
}

func TestConcurrentStopsWriteOneRecord(t *testing.T) {
	e := newEnv(t)
	e.release(t, 50)
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.rollouts.StopRollout(context.Background(), "routing", 1, "stop", "oncall")
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case !errors.Is(err, rollout.ErrNotReady):
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if won != 1 {
		t.Fatalf("%d stops won, want 1", won)
	}
}

func TestRollbackReturnsToTheGenerationThePromotionReplaced(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	promote := func(rel release.Release, from int64, epoch int64, key string) {
		t.Helper()
		ackAll(t, e, rel)
		if _, err := e.rollouts.Promote(ctx, rollout.Move{ConfigID: "routing", To: rel.Generation, ExpectedGeneration: from, ExpectedEpoch: epoch, IdempotencyKey: key}); err != nil {
			t.Fatal(err)
		}
	}
	g1 := e.release(t, 10)
	promote(g1, 0, 0, "p1")
	g2 := e.release(t, 20)
	if _, err := e.rollouts.StopRollout(ctx, "routing", 2, "bad canary", "oncall"); err != nil {
		t.Fatal(err)
	}
	g3 := e.release(t, 30)
	promote(g3, 1, 0, "p3")
	// Generation 3 replaced 1 (2 stopped and never ran): a rollback goes
	// to 1, not to 3's predecessor 2.
	rc, err := e.rollouts.Rollback(ctx, rollout.Move{ConfigID: "routing", ExpectedGeneration: 3, IdempotencyKey: "rb"})
	if err != nil || rc.To != 1 || rc.Epoch != 1 {
		t.Fatalf("Rollback = %+v, %v", rc, err)
	}
	for rel, want := range map[*release.Release]release.State{&g1: rollout.StateActive, &g2: rollout.StateStopped, &g3: rollout.StateRolledBack} {
		if got := e.state(t, *rel); got != want {
			t.Errorf("generation %d is %s, want %s", rel.Generation, got, want)
		}
	}
	// A rolled-back release is never promoted again: a new one is cut.
	if _, err := e.rollouts.Promote(ctx, rollout.Move{ConfigID: "routing", To: 3, ExpectedGeneration: 1, ExpectedEpoch: 1, IdempotencyKey: "again"}); !errors.Is(err, rollout.ErrNotReady) ||
		!strings.Contains(err.Error(), "was active once") {
		t.Fatalf("Promote of a rolled-back generation = %v", err)
	}
	g4 := e.release(t, 40)
	if e.state(t, g4) != release.StateCandidate {
		t.Fatalf("new release is %s", e.state(t, g4))
	}
	promote(g4, 1, 1, "p4")
	if e.state(t, g1) != rollout.StateSuperseded {
		t.Fatalf("generation 1 after 4 was promoted is %s", e.state(t, g1))
	}
	// 1 was first promoted from nothing: after rolling 4 back to 1, there
	// is nowhere further back to go.
	if _, err := e.rollouts.Rollback(ctx, rollout.Move{ConfigID: "routing", ExpectedGeneration: 4, ExpectedEpoch: 1, IdempotencyKey: "rb4"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.rollouts.Rollback(ctx, rollout.Move{ConfigID: "routing", ExpectedGeneration: 1, ExpectedEpoch: 2, IdempotencyKey: "rb1"}); !errors.Is(err, rollout.ErrCannotRollBack) {
		t.Fatalf("Rollback past the first promotion = %v", err)
	}
}

// supervise runs r's supervisor until the test ends and returns a watch
// on routing's stop records.
func supervise(t *testing.T, e *env, r *rollout.Rollouts, interval time.Duration) *watch.Watcher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	hub, err := watch.New(ctx, e.store)
	if err != nil {
		t.Fatal(err)
	}
	w, err := hub.Watch(ctx, store.SystemPrefix+"configs/routing/stops/", 0)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.Supervise(ctx, interval, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		w.Close()
		hub.Close()
	})
	return w
}

func TestTheSupervisorStopsAnOverdueRollout(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	w := supervise(t, e, e.rollouts, 5*time.Millisecond)
	rel := e.release(t, 50)
	e.ack(t, rel, "i0", "boot-1", 1, rollout.HealthyAcked)
	e.clock.Advance(2 * time.Hour) // past the one-hour deadline; nobody asks for status
	batch, err := w.Next(ctx)
	if err != nil || len(batch.Events) != 1 {
		t.Fatalf("stop record event = %+v, %v", batch, err)
	}
	stop, err := e.rollouts.GetStop(ctx, "routing", 1)
	if err != nil || stop == nil || !strings.Contains(stop.Reason, "the deadline passed") || stop.Evidence[0].Healthy != 1 ||
		stop.Evidence[0].Outcome != quorum.Failed {
		t.Fatalf("stop record = %+v, %v", stop, err)
	}
}

func TestAStoppedRolloutCallsTheCanariesBack(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.promoted(t, 10)
	e.release(t, 20)
	assigned := func() rollout.Assignment {
		t.Helper()
		as, _, err := e.rollouts.Assignments(ctx, "i0")
		if err != nil || len(as) != 1 {
			t.Fatalf("assignments = %+v, %v", as, err)
		}
		return as[0]
	}
	if a := assigned(); a.Generation != 2 || a.Stage != "zones" {
		t.Fatalf("canary assignment = %+v", a)
	}
	if _, err := e.rollouts.StopRollout(ctx, "routing", 2, "bad", "oncall"); err != nil {
		t.Fatal(err)
	}
	if a := assigned(); a.Generation != 1 || a.Stage != "" {
		t.Fatalf("assignment after the stop = %+v", a)
	}
}

// lostAnswerStore commits transactions in the real store and then reports
// a timeout, as a networked store does when the reply to a committed write
// is lost.
type lostAnswerStore struct {
	store.Store
	lose bool
}

func (s *lostAnswerStore) Txn(ctx context.Context, t store.Txn) (store.Result, error) {
	res, err := s.Store.Txn(ctx, t)
	if err == nil && s.lose {
		return store.Result{}, context.DeadlineExceeded
	}
	return res, err
}

func TestAPromotionWhoseAnswerIsLostIsUnknownAndResolvedByItsKey(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	rel := e.release(t, 50)
	ackAll(t, e, rel)
	lossy := &lostAnswerStore{Store: e.store, lose: true}
	rollouts := run(t, rollout.New(lossy, e.releases, e.registry, rollout.WithClock(e.clock.Now)))
	move := rollout.Move{ConfigID: "routing", To: 1, IdempotencyKey: "p1", Actor: "alice"}
	_, err := rollouts.Promote(ctx, move)
	var unknown *rollout.UnknownError
	if !errors.Is(err, rollout.ErrPromotionUnknown) || !errors.As(err, &unknown) || unknown.IdempotencyKey != "p1" {
		t.Fatalf("Promote with its answer lost = %v", err)
	}
	// It did happen: the receipt under the key says so, and a retry with
	// the key returns that receipt instead of promoting twice.
	rc, err := rollouts.GetPromotion(ctx, "routing", "p1")
	if err != nil || rc.To != 1 || rc.Actor != "alice" {
		t.Fatalf("GetPromotion = %+v, %v", rc, err)
	}
	lossy.lose = false
	again, err := rollouts.Promote(ctx, move)
	if err != nil || again.Revision != rc.Revision {
		t.Fatalf("retry = %+v, %v", again, err)
	}
	if receipts, err := rollouts.Receipts(ctx, "routing"); err != nil || len(receipts) != 1 {
		t.Fatalf("receipts = %d, %v", len(receipts), err)
	}
}

func TestAnAckFromAnOlderRegistrationDoesNotCount(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	rel := e.release(t, 50)
	old, err := e.registry.Get(ctx, "i0")
	if err != nil {
		t.Fatal(err)
	}
	// i0 lost its lease and registered again, with the same boot ID.
	again, err := e.registry.Register(ctx, instance.Instance{WorkloadIdentity: "i0", BootID: "boot-1", Zone: "zone-a"})
	if err != nil || again.MembershipEpoch <= old.MembershipEpoch || rel.MembershipEpoch < old.MembershipEpoch {
		t.Fatalf("epochs: release %d, old %d, new %+v, %v", rel.MembershipEpoch, old.MembershipEpoch, again, err)
	}
	ack := func(epoch int64) rollout.Ack {
		t.Helper()
		a, err := e.rollouts.RecordAck(ctx, rollout.Ack{ConfigID: "routing", Generation: 1, WorkloadIdentity: "i0", BootID: "boot-1",
			MembershipEpoch: epoch, ApplySequence: 1, ContentDigest: rel.ContentDigest, ValidatorDigest: rel.ValidatorDigest,
			State: rollout.HealthyAcked, HealthOK: true})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	if a := ack(old.MembershipEpoch); a.Counted || !strings.Contains(a.Why, fmt.Sprintf("stale membership epoch %d", old.MembershipEpoch)) {
		t.Fatalf("ACK of the old registration = %+v", a)
	}
	if a := ack(again.MembershipEpoch); !a.Counted {
		t.Fatalf("ACK of the current registration = %+v", a)
	}
}

func TestAFractionStageCohortIsFixedPerRelease(t *testing.T) {
	e := newEnv(t)
	spec := func(s *release.Spec) {
		s.Stages = []release.Stage{
			{Name: "canary", Policy: quorum.Policy{Kind: quorum.Fraction, Fraction: 0.3}},
			{Name: "half", Policy: quorum.Policy{Kind: quorum.Fraction, Fraction: 0.5}},
		}
	}
	rel := e.releaseWith(t, 50, spec)
	canaries := rollout.Cohort(rel, 0)
	if len(canaries) != 2 { // ceil(0.3 x 6)
		t.Fatalf("cohort of 30%% of 6 = %v", canaries)
	}
	if again := rollout.Cohort(rel, 0); fmt.Sprint(again) != fmt.Sprint(canaries) {
		t.Fatalf("cohort changed between calls: %v, %v", canaries, again)
	}
	// The second stage draws from the four the canary left: half of them.
	half := rollout.Cohort(rel, 1)
	for id := range half {
		if canaries[id] {
			t.Fatalf("half cohort %v holds canary %s", half, id)
		}
	}
	if len(half) != 2 {
		t.Fatalf("half cohort = %v; want 2 of the 4 the canary left", half)
	}
	// Each release draws its own canaries: over a few generations, more
	// than two instances take a turn.
	seen := map[string]bool{}
	for range 8 {
		for id := range rollout.Cohort(e.releaseWith(t, 50, spec), 0) {
			seen[id] = true
		}
	}
	if len(seen) <= 2 {
		t.Fatalf("every release picked the same canaries: %v", seen)
	}
}

func TestDependenciesAppVersionsAndSecretRefs(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.registry.Register(ctx, instance.Instance{WorkloadIdentity: "i0", BootID: "boot-1", Zone: "zone-a", AppVersion: "1.9.3"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.registry.Register(ctx, instance.Instance{WorkloadIdentity: "i1", BootID: "boot-1", Zone: "zone-b", AppVersion: "v2.1.0-rc.1"}); err != nil {
		t.Fatal(err)
	}
	_, err := e.releases.Create(ctx, release.Spec{ConfigID: "routing", MediaType: "application/json", ValidatorDigest: e.digest,
		Content: []byte(`{"upstreams":[{"host":"a","weight":100}]}`), Deadline: time.Hour, Dependencies: map[string]int64{"limits": 1},
		Stages: []release.Stage{{Name: "all", Policy: quorum.Policy{Kind: quorum.All}}}}, "ci")
	if !errors.Is(err, release.ErrInvalid) || !strings.Contains(err.Error(), "limits has no generation 1") {
		t.Fatalf("release needing a missing dependency = %v", err)
	}
	for _, bad := range []func(*release.Spec){
		func(s *release.Spec) { s.SecretRefs = []string{"hunter2"} },
		func(s *release.Spec) { s.SecretRefs = []string{"Tr0ub4dor@3"} },
		func(s *release.Spec) { s.SecretRefs = []string{"postgres://admin:hunter2@db/x#1"} },
		func(s *release.Spec) { s.SecretRefs = []string{"vault://secret/db#7 hunter2"} },
		func(s *release.Spec) { s.MinAppVersion = "latest" },
	} {
		spec := release.Spec{ConfigID: "routing", MediaType: "application/json", ValidatorDigest: e.digest, Deadline: time.Hour,
			Content: []byte(`{}`), Stages: []release.Stage{{Name: "all", Policy: quorum.Policy{Kind: quorum.All}}}}
		bad(&spec)
		if _, err := e.releases.Create(ctx, spec, "ci"); !errors.Is(err, release.ErrInvalid) {
			t.Fatalf("bad spec %+v = %v", spec, err)
		}
	}
	rel := e.releaseWith(t, 50, func(s *release.Spec) {
		s.MinAppVersion = "2.0"
		s.SecretRefs = []string{"vault://secret/data/db#7",
			"aws-sm://arn:aws:secretsmanager:eu-west-1:123456789012:secret:db#AWSCURRENT", "k8s://payments/db-credentials/password#1234"}
	})
	if len(rel.Membership) != 1 || rel.Membership[0].ID != "i1" || len(rel.Ineligible) != 5 {
		t.Fatalf("membership %+v, ineligible %+v; only i1 runs 2.0 or later", rel.Membership, rel.Ineligible)
	}
	// A release depending on routing@1 waits for routing@1 to be active.
	dep, err := e.releases.Create(ctx, release.Spec{ConfigID: "limits", MediaType: "application/json", ValidatorDigest: e.digest,
		Content: []byte(`{"upstreams":[{"host":"a","weight":100}]}`), Deadline: time.Hour, Dependencies: map[string]int64{"routing": 1},
		Stages: []release.Stage{{Name: "all", Policy: quorum.Policy{Kind: quorum.All}}}}, "ci")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.rollouts.Promote(ctx, rollout.Move{ConfigID: "limits", To: dep.Generation, IdempotencyKey: "l1"}); !errors.Is(err, rollout.ErrNotReady) ||
		!strings.Contains(err.Error(), "depends on routing generation 1") {
		t.Fatalf("Promote before the dependency = %v", err)
	}
}

// TestTheSupervisorWakesAtTheDeadline runs the supervisor on a clock that
// follows wall time, with an hour between its fallback checks: only the
// deadline timer, armed when the release arrives, can stop the rollout.
func TestTheSupervisorWakesAtTheDeadline(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	// The release will be created at e.clock's time with a one-hour
	// deadline; the supervisor's clock reaches it 300 ms from now.
	offset := e.clock.Now().Add(time.Hour - 300*time.Millisecond).Sub(time.Now())
	wallClock := func() time.Time { return time.Now().Add(offset) }
	supervised := run(t, rollout.New(e.store, e.releases, e.registry, rollout.WithClock(wallClock)))
	w := supervise(t, e, supervised, time.Hour)
	rel := e.release(t, 50)
	batch, err := w.Next(ctx)
	if err != nil || len(batch.Events) != 1 {
		t.Fatalf("stop record event = %+v, %v", batch, err)
	}
	if now, due := wallClock(), rel.CreatedAt.Add(rel.Deadline); now.Before(due) {
		t.Fatalf("stopped at %v, before the deadline %v", now, due)
	}
	stop, err := supervised.GetStop(ctx, "routing", rel.Generation)
	if err != nil || stop == nil || !strings.Contains(stop.Reason, "the deadline passed") {
		t.Fatalf("stop record = %+v, %v", stop, err)
	}
}
