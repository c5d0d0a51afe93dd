package rollout_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pawlcfg/pawl/internal/testkit/testclock"
	"github.com/pawlcfg/pawl/internal/testkit/wasmbuild"
	"github.com/pawlcfg/pawl/server/internal/instance"
	"github.com/pawlcfg/pawl/server/internal/quorum"
	"github.com/pawlcfg/pawl/server/internal/release"
	"github.com/pawlcfg/pawl/server/internal/rollout"
	"github.com/pawlcfg/pawl/server/internal/store"
	"github.com/pawlcfg/pawl/server/internal/store/boltstore"
	"github.com/pawlcfg/pawl/validators/host"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		wasmbuild.Cleanup()
		os.Exit(code)
	}))
}

type env struct {
	clock    *testclock.Clock
	store    store.Store
	registry *instance.Registry
	releases *release.Releases
	rollouts *rollout.Rollouts
	digest   string
}

// newEnv wires the real store, registry, releases (validated by the real
// routing module) and rollouts, with six instances in three zones.
func newEnv(t *testing.T, opts ...rollout.Option) *env {
	t.Helper()
	st, err := boltstore.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return newEnvOn(t, st, st, 6, opts...)
}

// newEnvOn is newEnv over st, with n instances, and Rollouts (made with
// opts) that write through rst: st, or a wrapper of it.
func newEnvOn(t testing.TB, st, rst store.Store, n int, opts ...rollout.Option) *env {
	t.Helper()
	ctx := context.Background()
	v := wasmbuild.Load(t, "routing")
	e := &env{clock: testclock.New(time.Now()), store: st, digest: v.Info().Digest}
	var err error
	if e.registry, err = instance.New(ctx, st, time.Hour, instance.WithClock(e.clock.Now)); err != nil {
		t.Fatal(err)
	}
	e.releases = release.New(st, func(ctx context.Context, _ string, in host.Input) (host.Result, error) { return v.Validate(ctx, in) }, e.registry.Members, release.WithClock(e.clock.Now))
	e.rollouts = run(t, rollout.New(rst, e.releases, e.registry, append([]rollout.Option{rollout.WithClock(e.clock.Now)}, opts...)...))
	for i := range n {
		e.register(t, fmt.Sprintf("i%d", i), "boot-1", fmt.Sprintf("zone-%c", 'a'+i%3))
	}
	return e
}

// run runs r's views until the test ends (before its store closes).
func run(t testing.TB, r *rollout.Rollouts) *rollout.Rollouts {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.Run(ctx); err != nil {
			t.Error(err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return r
}

func (e *env) register(t testing.TB, id, boot, zone string) {
	t.Helper()
	if _, err := e.registry.Register(context.Background(), instance.Instance{WorkloadIdentity: id, BootID: boot, Zone: zone, Role: "worker", TrafficWeight: 1}); err != nil {
		t.Fatal(err)
	}
}

func (e *env) release(t testing.TB, weight int) release.Release {
	t.Helper()
	return e.releaseWith(t, weight, func(*release.Spec) {})
}

func (e *env) releaseWith(t testing.TB, weight int, edit func(*release.Spec)) release.Release {
	t.Helper()
	spec := release.Spec{
		ConfigID: "routing", MediaType: "application/json", ValidatorDigest: e.digest,
		Content:  []byte(fmt.Sprintf(`{"upstreams":[{"host":"a","weight":%d},{"host":"b","weight":%d}]}`, weight, 100-weight)),
		Stages:   []release.Stage{{Name: "zones", Policy: quorum.Policy{Kind: quorum.ZoneQuorum, Fraction: 1}}},
		Deadline: time.Hour,
	}
	edit(&spec)
	rel, err := e.releases.Create(context.Background(), spec, "ci")
	if err != nil {
		t.Fatal(err)
	}
	return rel
}

// ack reports state for id's boot at apply sequence seq, from the
// instance's current registration (its membership epoch), and returns the
// ACK as judged.
func (e *env) ack(t *testing.T, rel release.Release, id, boot string, seq int64, state rollout.AckState, opts ...func(*rollout.Ack)) rollout.Ack {
	t.Helper()
	got, err := e.rollouts.RecordAck(context.Background(), e.ackOf(t, rel, id, boot, seq, state, opts...))
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// ackOf is the ACK that ack records.
func (e *env) ackOf(t testing.TB, rel release.Release, id, boot string, seq int64, state rollout.AckState, opts ...func(*rollout.Ack)) rollout.Ack {
	t.Helper()
	reg, err := e.registry.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	a := rollout.Ack{
		ConfigID: rel.ConfigID, Generation: rel.Generation, WorkloadIdentity: id, BootID: boot, ApplySequence: seq,
		MembershipEpoch: reg.MembershipEpoch, ContentDigest: rel.ContentDigest, ValidatorDigest: rel.ValidatorDigest,
		State: state, HealthOK: true, TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	}
	if state == rollout.HealthyAcked {
		a.Held = rel.HealthWindow // by its own clock, the instance held it for the window
	}
	for _, o := range opts {
		o(&a)
	}
	return a
}

func TestStageBlocksUntilEveryZoneAcksThenPromotes(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	rel := e.release(t, 50)
	for _, id := range []string{"i0", "i1", "i3", "i4"} { // zone-c (i2, i5) never ACKs
		e.ack(t, rel, id, "boot-1", 1, rollout.HealthyAcked)
	}
	move := rollout.Move{ConfigID: "routing", To: rel.Generation, IdempotencyKey: "promote-1", Actor: "alice"}
	_, err := e.rollouts.Promote(ctx, move)
	if !errors.Is(err, rollout.ErrNotReady) || !strings.Contains(err.Error(), `zone "zone-c" has 0 of 2 healthy`) {
		t.Fatalf("Promote with zone-c silent = %v", err)
	}
	e.ack(t, rel, "i2", "boot-1", 1, rollout.HealthyAcked)
	e.ack(t, rel, "i5", "boot-1", 1, rollout.HealthyAcked)
	rc, err := e.rollouts.Promote(ctx, move)
	if err != nil || rc.From != 0 || rc.To != 1 || rc.Epoch != 0 || rc.Actor != "alice" || len(rc.Evidence) != 1 || rc.Evidence[0].Healthy != 6 {
		t.Fatalf("Promote = %+v, %v", rc, err)
	}
	// The same idempotency key again: the same receipt, nothing new.
	again, err := e.rollouts.Promote(ctx, move)
	if err != nil || again.Revision != rc.Revision {
		t.Fatalf("repeat Promote = %+v, %v", again, err)
	}
	ptr, err := e.rollouts.Pointer(ctx, "routing")
	if err != nil || ptr.Generation != 1 || ptr.Epoch != 0 || !strings.HasSuffix(ptr.ReceiptKey, "/receipts/promote-1") {
		t.Fatalf("pointer = %+v, %v", ptr, err)
	}
	// A stale expectation is refused with the pointer as it is.
	_, err = e.rollouts.Promote(ctx, rollout.Move{ConfigID: "routing", To: 1, IdempotencyKey: "other"})
	var moved *rollout.PointerError
	if !errors.As(err, &moved) || moved.Pointer.Generation != 1 {
		t.Fatalf("Promote with a stale expectation = %v", err)
	}
}

func TestAcksThatDoNotCountAreKeptWithTheirReason(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	rel := e.release(t, 50)
	e.register(t, "late-joiner", "boot-1", "zone-a") // after the freeze
	if a := e.ack(t, rel, "late-joiner", "boot-1", 1, rollout.HealthyAcked); a.Counted || !strings.Contains(a.Why, "not in the release's frozen membership") {
		t.Fatalf("late joiner ACK = %+v", a)
	}
	if a := e.ack(t, rel, "i0", "boot-1", 3, rollout.HealthyAcked); !a.Counted {
		t.Fatalf("good ACK = %+v", a)
	}
	if a := e.ack(t, rel, "i0", "boot-1", 3, rollout.HealthyAcked); a.Counted || !strings.Contains(a.Why, "duplicate: HEALTHY_ACKED at apply sequence 3") {
		t.Fatalf("duplicate ACK = %+v", a)
	}
	if a := e.ack(t, rel, "i0", "boot-1", 2, rollout.Applied); a.Counted || !strings.Contains(a.Why, "out of order: apply sequence 2 after 3") {
		t.Fatalf("out-of-order ACK = %+v", a)
	}
	e.register(t, "i1", "boot-2", "zone-b") // i1 restarted
	if a := e.ack(t, rel, "i1", "boot-1", 1, rollout.HealthyAcked); a.Counted || !strings.Contains(a.Why, "stale boot boot-1") {
		t.Fatalf("old boot ACK = %+v", a)
	}
	if wrong := e.ack(t, rel, "i2", "boot-1", 1, rollout.HealthyAcked, func(a *rollout.Ack) { a.ContentDigest = "sha256:00" }); wrong.Counted ||
		!strings.Contains(wrong.Why, "content digest sha256:00 is not the release's") {
		t.Fatalf("wrong-digest ACK = %+v", wrong)
	}
	acks, err := e.rollouts.Acks(ctx, "routing", 1)
	if err != nil || len(acks) != 6 {
		t.Fatalf("audit trail holds %d ACKs, %v; want all 6", len(acks), err)
	}
	st, err := e.rollouts.Status(ctx, "routing", 1)
	if err != nil || st.Stages[0].Evaluation.Healthy != 1 || st.Stages[0].States["HEALTHY_ACKED"] != 1 || st.Stages[0].States["NO_ACK"] != 5 {
		t.Fatalf("counted states = %+v, %v", st.Stages, err)
	}
	for _, bad := range []rollout.Ack{
		{ConfigID: "routing", Generation: 1, State: "MAYBE"},
		{ConfigID: "routing", Generation: 1, WorkloadIdentity: "i0", BootID: "boot-1", State: rollout.Applied}, // no membership epoch
		{ConfigID: "routing", Generation: 1, WorkloadIdentity: "i0", BootID: "boot-1", MembershipEpoch: 1, State: rollout.Applied, ApplySequence: -1},
		{ConfigID: "routing", Generation: 1, WorkloadIdentity: "i0", BootID: "boot-1", MembershipEpoch: 1, State: rollout.HealthyAcked,
			Health: &rollout.Health{ErrorRate: 1.5}},
	} {
		if _, err := e.rollouts.RecordAck(ctx, bad); !errors.Is(err, rollout.ErrInvalid) {
			t.Fatalf("malformed ACK %+v = %v", bad, err)
		}
	}
	if acks, _ := e.rollouts.Acks(ctx, "routing", 1); len(acks) != 6 {
		t.Fatalf("malformed ACKs were stored: %d ACKs", len(acks))
	}
}

func TestRejectionsFailTheStage(t *testing.T) {
	e := newEnv(t)
	rel := e.release(t, 50)
	for i := range 5 {
		e.ack(t, rel, fmt.Sprintf("i%d", i), "boot-1", 1, rollout.HealthyAcked)
	}
	e.ack(t, rel, "i5", "boot-1", 1, rollout.Rejected)
	ctx := context.Background()
	// The rejection stopped the rollout as it was recorded: the stop record
	// keeps the tallies of that moment.
	stop, err := e.rollouts.GetStop(ctx, "routing", 1)
	if err != nil || stop == nil || stop.Stage != "zones" || stop.Manual || len(stop.Evidence) != 1 ||
		stop.Evidence[0].Healthy != 5 || stop.Evidence[0].Rejected != 1 {
		t.Fatalf("stop record = %+v, %v", stop, err)
	}
	st, err := e.rollouts.Status(ctx, "routing", 1)
	if err != nil || st.Stages[0].Evaluation.Outcome != quorum.Failed || st.Stop == nil || st.Stop.Revision != stop.Revision {
		t.Fatalf("status = %+v, %v", st, err)
	}
	// After the stop, ACKs are kept but do not count: the evidence is frozen.
	if a := e.ack(t, rel, "i5", "boot-1", 2, rollout.HealthyAcked); a.Counted || !strings.Contains(a.Why, "the rollout stopped") {
		t.Fatalf("ACK after the stop = %+v", a)
	}
	if _, err := e.rollouts.Promote(ctx, rollout.Move{ConfigID: "routing", To: 1, IdempotencyKey: "k"}); !errors.Is(err, rollout.ErrNotReady) ||
		!strings.Contains(err.Error(), "rollout stopped") {
		t.Fatalf("Promote of a stopped rollout = %v", err)
	}
	if state := e.state(t, rel); state != rollout.StateStopped {
		t.Fatalf("state = %s", state)
	}
}

func (e *env) state(t *testing.T, rel release.Release) release.State {
	t.Helper()
	state, err := e.rollouts.ReleaseStates(context.Background(), rel.ConfigID)
	if err != nil {
		t.Fatal(err)
	}
	return state(rel)
}

// promoted creates a release, has every instance report healthy, and
// promotes it from the pointer as it stands, with key p<generation>.
func (e *env) promoted(t *testing.T, weight int) release.Release {
	t.Helper()
	ctx := context.Background()
	rel := e.release(t, weight)
	ackAll(t, e, rel)
	ptr, err := e.rollouts.Pointer(ctx, "routing")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.rollouts.Promote(ctx, rollout.Move{ConfigID: "routing", To: rel.Generation, ExpectedGeneration: ptr.Generation,
		ExpectedEpoch: ptr.Epoch, IdempotencyKey: fmt.Sprintf("p%d", rel.Generation)}); err != nil {
		t.Fatal(err)
	}
	return rel
}

func ackAll(t *testing.T, e *env, rel release.Release) {
	for i := range 6 {
		e.ack(t, rel, fmt.Sprintf("i%d", i), "boot-1", rel.Generation, rollout.HealthyAcked)
	}
}

func TestFiftyConcurrentPromotionsWriteOneReceipt(t *testing.T) {
	e := newEnv(t)
	rel := e.release(t, 50)
	ackAll(t, e, rel)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var wins int
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.rollouts.Promote(context.Background(), rollout.Move{ConfigID: "routing", To: 1, IdempotencyKey: fmt.Sprintf("racer-%d", i)})
			var moved *rollout.PointerError
			switch {
			case err == nil:
				mu.Lock()
				wins++
				mu.Unlock()
			case errors.As(err, &moved):
				if moved.Pointer.Generation != 1 {
					t.Errorf("loser saw pointer %+v", moved.Pointer)
				}
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	receipts, err := e.rollouts.Receipts(context.Background(), "routing")
	if err != nil || wins != 1 || len(receipts) != 1 {
		t.Fatalf("%d wins, %d receipts (%v)", wins, len(receipts), err)
	}
}

func TestRollbackWritesANewReceiptAndKeepsEverything(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	first := e.release(t, 50)
	ackAll(t, e, first)
	if _, err := e.rollouts.Promote(ctx, rollout.Move{ConfigID: "routing", To: 1, IdempotencyKey: "p1"}); err != nil {
		t.Fatal(err)
	}
	second := e.release(t, 70)
	ackAll(t, e, second)
	if _, err := e.rollouts.Promote(ctx, rollout.Move{ConfigID: "routing", To: 2, ExpectedGeneration: 1, IdempotencyKey: "p2"}); err != nil {
		t.Fatal(err)
	}
	// ACKs of generation 1 after it was promoted past are late.
	if a := e.ack(t, first, "i0", "boot-1", 9, rollout.HealthyAcked); a.Counted || !strings.Contains(a.Why, "late") {
		t.Fatalf("late ACK = %+v", a)
	}
	rc, err := e.rollouts.Rollback(ctx, rollout.Move{ConfigID: "routing", ExpectedGeneration: 2, IdempotencyKey: "rb1", Actor: "oncall"})
	if err != nil || !rc.Rollback || rc.From != 2 || rc.To != 1 || rc.Epoch != 1 {
		t.Fatalf("Rollback = %+v, %v", rc, err)
	}
	ptr, _ := e.rollouts.Pointer(ctx, "routing")
	if ptr.Generation != 1 || ptr.Epoch != 1 {
		t.Fatalf("pointer after rollback = %+v", ptr)
	}
	receipts, err := e.rollouts.Receipts(ctx, "routing")
	if err != nil || len(receipts) != 3 || receipts[2].IdempotencyKey != "rb1" {
		t.Fatalf("receipts = %+v, %v", receipts, err)
	}
	if rel, err := e.releases.Get(ctx, "routing", 2); err != nil || rel.Generation != 2 {
		t.Fatalf("the rolled-back release is gone: %v", err)
	}
	if acks, err := e.rollouts.Acks(ctx, "routing", 2); err != nil || len(acks) != 6 {
		t.Fatalf("the rolled-back release's ACKs: %d, %v", len(acks), err)
	}
	if got, err := e.rollouts.GetPromotion(ctx, "routing", "p2"); err != nil || got.To != 2 {
		t.Fatalf("GetPromotion(p2) = %+v, %v", got, err)
	}
	if _, err := e.rollouts.GetPromotion(ctx, "routing", "never"); !errors.Is(err, rollout.ErrNoPromotion) {
		t.Fatalf("GetPromotion(never) = %v", err)
	}
}

func TestAStageWaitingAtTheDeadlineFails(t *testing.T) {
	e := newEnv(t)
	rel := e.release(t, 50) // deadline: one hour
	for _, id := range []string{"i0", "i1", "i3", "i4"} {
		e.ack(t, rel, id, "boot-1", 1, rollout.HealthyAcked)
	}
	st, err := e.rollouts.Status(context.Background(), "routing", 1)
	if err != nil || st.Stages[0].Evaluation.Outcome != quorum.Waiting || st.Stop != nil {
		t.Fatalf("before the deadline: %+v, %v", st, err)
	}
	e.clock.Advance(2 * time.Hour)
	// Status only reads: it shows the stage failed, and Settle (the
	// supervisor, or the next ACK) records the stop.
	st, err = e.rollouts.Status(context.Background(), "routing", 1)
	if ev := st.Stages[0].Evaluation; err != nil || ev.Outcome != quorum.Failed || !strings.Contains(ev.Reason, "the deadline passed") ||
		ev.Healthy != 4 || st.Stop != nil {
		t.Fatalf("after the deadline: %+v, %v", st, err)
	}
	if err := e.rollouts.Settle(context.Background(), "routing", 1); err != nil {
		t.Fatal(err)
	}
	st, err = e.rollouts.Status(context.Background(), "routing", 1)
	if err != nil || st.Stop == nil || !strings.Contains(st.Stop.Reason, "the deadline passed") || st.Stop.Evidence[0].Healthy != 4 {
		t.Fatalf("after Settle: %+v, %v", st.Stop, err)
	}
	if _, err := e.rollouts.Promote(context.Background(), rollout.Move{ConfigID: "routing", To: 1, IdempotencyKey: "late"}); !errors.Is(err, rollout.ErrNotReady) {
		t.Fatalf("Promote after the deadline = %v", err)
	}
}
