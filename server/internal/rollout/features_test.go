package rollout_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pawlcfg/pawl/server/internal/quorum"
	"github.com/pawlcfg/pawl/server/internal/release"
	"github.com/pawlcfg/pawl/server/internal/rollout"
)

// assignments renders an instance's assignments as "gen" or "gen:stage",
// with "~" before a shadow one.
func (e *env) assignments(t *testing.T, id string) string {
	t.Helper()
	as, _, err := e.rollouts.Assignments(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range as {
		s := ""
		if a.Shadow {
			s = "~"
		}
		s += strconv.FormatInt(a.Generation, 10)
		if a.Stage != "" {
			s += ":" + a.Stage
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

// TestAShadowStageValidatesAndNeverApplies: zone-a's instances are
// assigned generation 2 to validate beside generation 1, which they keep
// running; they pass their stage with VALIDATED, and an APPLIED from them
// does not count while only the shadow stage reached them. The next stage
// takes them too: once it is reached they are assigned generation 2 to
// apply, and their shadow VALIDATED counts for nothing there.
func TestAShadowStageValidatesAndNeverApplies(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.promoted(t, 10)
	rel := e.releaseWith(t, 50, func(s *release.Spec) {
		s.Stages = []release.Stage{
			{Name: "mirror", Selector: map[string]string{"zone": "zone-a"}, Shadow: true, Policy: quorum.Policy{Kind: quorum.All}},
			{Name: "rest", Policy: quorum.Policy{Kind: quorum.All}},
		}
	})
	if got := e.assignments(t, "i0"); got != "1 ~2:mirror" {
		t.Fatalf("i0 (zone-a) is assigned %q; want generation 1 to run and 2 to validate", got)
	}
	if got := e.assignments(t, "i1"); got != "1" {
		t.Fatalf("i1 is assigned %q before the shadow stage passed", got)
	}
	if a := e.ack(t, rel, "i0", "boot-1", 2, rollout.Applied); a.Counted || !strings.Contains(a.Why, `shadow stage "mirror" and must not apply it`) {
		t.Fatalf("APPLIED from a shadow instance = %+v", a)
	}
	for _, id := range []string{"i0", "i3"} {
		if a := e.ack(t, rel, id, "boot-1", 3, rollout.Validated); !a.Counted {
			t.Fatalf("VALIDATED of %s = %+v", id, a)
		}
	}
	st := e.status(t, 2)
	if !st.Stages[0].Shadow || st.Stages[0].Evaluation.Outcome != quorum.Passed || !st.Stages[1].Reached ||
		st.Stages[1].Evaluation.Members != 6 || st.Stages[1].Evaluation.Healthy != 0 {
		t.Fatalf("after the shadow stage: %+v", st.Stages)
	}
	for _, id := range []string{"i0", "i1"} {
		if got := e.assignments(t, id); got != "2:rest" {
			t.Fatalf("%s after the shadow stage passed: %q", id, got)
		}
	}
	for _, id := range members() {
		e.ack(t, rel, id, "boot-1", 4, rollout.HealthyAcked)
	}
	if _, err := e.rollouts.Promote(ctx, rollout.Move{ConfigID: "routing", To: 2, ExpectedGeneration: 1, IdempotencyKey: "p2"}); err != nil {
		t.Fatal(err)
	}
	if got := e.assignments(t, "i0"); got != "2" {
		t.Fatalf("i0 after the promotion: %q; everyone runs the active generation", got)
	}
	// A health budget on a shadow stage means nothing: it is refused.
	_, err := e.releases.Create(ctx, release.Spec{ConfigID: "routing", MediaType: "application/json", ValidatorDigest: e.digest, Deadline: time.Hour,
		Content: []byte(`{"upstreams":[{"host":"a","weight":100}]}`), Stages: []release.Stage{{Name: "m", Shadow: true,
			Policy: quorum.Policy{Kind: quorum.All}, Budget: &release.Budget{MaxP99: time.Second}}}}, "ci")
	if !errors.Is(err, release.ErrInvalid) || !strings.Contains(err.Error(), "shadow stage never applies") {
		t.Fatalf("a budget on a shadow stage = %v", err)
	}
}

// TestHealthBudgets: a stage's budget is checked against what each
// instance measured over its health window. A healthy report without a
// measurement does not count; one within the budget counts healthy; one
// outside it counts as a rejection, and enough of them stop the rollout.
func TestHealthBudgets(t *testing.T) {
	e := newEnv(t)
	maxErrors := 0.01
	rel := e.releaseWith(t, 50, func(s *release.Spec) {
		s.Stages[0].Budget = &release.Budget{MaxErrorRate: &maxErrors, MaxP99: 200 * time.Millisecond}
		s.Stages[0].Policy.MaxRejected = 1
	})
	measured := func(rate float64, p99 time.Duration) func(*rollout.Ack) {
		return func(a *rollout.Ack) { a.Health = &rollout.Health{ErrorRate: rate, P99: p99} }
	}
	if a := e.ack(t, rel, "i0", "boot-1", 1, rollout.HealthyAcked); a.Counted || !strings.Contains(a.Why, "has a health budget (max-error-rate=0.01,max-p99=200ms)") {
		t.Fatalf("healthy without a measurement = %+v", a)
	}
	if a := e.ack(t, rel, "i0", "boot-1", 1, rollout.HealthyAcked, measured(0.001, 150*time.Millisecond)); !a.Counted || a.Breach != "" {
		t.Fatalf("healthy within the budget = %+v", a)
	}
	a := e.ack(t, rel, "i1", "boot-1", 1, rollout.HealthyAcked, measured(0.05, 150*time.Millisecond))
	if !a.Counted || !strings.Contains(a.Breach, "error rate 0.05 is over the budget of 0.01") {
		t.Fatalf("healthy over the error budget = %+v", a)
	}
	st := e.status(t, 1)
	if ev := st.Stages[0].Evaluation; ev.Healthy != 1 || ev.Rejected != 1 || st.Stages[0].States["UNHEALTHY"] != 1 || st.Stop != nil {
		t.Fatalf("after one breach: %+v %v", ev, st.Stages[0].States)
	}
	if a := e.ack(t, rel, "i2", "boot-1", 1, rollout.HealthyAcked, measured(0, time.Second)); !a.Counted || !strings.Contains(a.Breach, "p99 latency 1s is over the budget of 200ms") {
		t.Fatalf("healthy over the latency budget = %+v", a)
	}
	if stop := e.status(t, 1).Stop; stop == nil || !strings.Contains(stop.Reason, "2 members rejected; the stage tolerates 1") {
		t.Fatalf("two breaches past a tolerance of one: stop %+v", stop)
	}
	for _, bad := range []release.Budget{{}, {MaxErrorRate: new(float64(2))}, {MaxP99: -time.Second}} {
		_, err := e.releases.Create(context.Background(), release.Spec{ConfigID: "routing", MediaType: "application/json", ValidatorDigest: e.digest,
			Deadline: time.Hour, Content: []byte(`{"upstreams":[{"host":"a","weight":100}]}`),
			Stages: []release.Stage{{Name: "s", Policy: quorum.Policy{Kind: quorum.All}, Budget: &bad}}}, "ci")
		if !errors.Is(err, release.ErrInvalid) {
			t.Fatalf("budget %+v = %v", bad, err)
		}
	}
}

// TestRetiringAMember: an instance that will never come back blocks an
// "all" stage until it is retired; the retirement records who, when and
// why, is the only way the denominator shrinks, and passes the stage.
func TestRetiringAMember(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	rel := e.releaseWith(t, 50, func(s *release.Spec) { s.Stages[0].Policy = quorum.Policy{Kind: quorum.All} })
	for _, id := range []string{"i0", "i1", "i2", "i3", "i4"} {
		e.ack(t, rel, id, "boot-1", 1, rollout.HealthyAcked)
	}
	if ev := e.status(t, 1).Stages[0].Evaluation; ev.Outcome != quorum.Waiting || ev.Members != 6 {
		t.Fatalf("before the retirement: %+v", ev)
	}
	for _, bad := range []struct {
		id, reason string
		want       error
	}{
		{"i5", "", rollout.ErrInvalid},
		{"nobody", "gone", rollout.ErrNotMember},
	} {
		if _, err := e.rollouts.Retire(ctx, "routing", 1, bad.id, bad.reason, "oncall"); !errors.Is(err, bad.want) {
			t.Fatalf("Retire(%q, %q) = %v, want %v", bad.id, bad.reason, err, bad.want)
		}
	}
	rt, err := e.rollouts.Retire(ctx, "routing", 1, "i5", "host decommissioned", "oncall")
	if err != nil || rt.Actor != "oncall" || rt.Reason != "host decommissioned" || rt.Time.IsZero() {
		t.Fatalf("Retire = %+v, %v", rt, err)
	}
	st := e.status(t, 1)
	if ev := st.Stages[0].Evaluation; ev.Outcome != quorum.Passed || ev.Members != 5 || st.Stages[0].Retired != 1 || len(st.Retirements) != 1 ||
		len(st.Progress.Passed) != 1 {
		t.Fatalf("after the retirement: %+v, retired %d, %+v", ev, st.Stages[0].Retired, st.Retirements)
	}
	if a := e.ack(t, rel, "i5", "boot-1", 1, rollout.HealthyAcked); a.Counted || !strings.Contains(a.Why, "retired from the membership") {
		t.Fatalf("ACK of the retired member = %+v", a)
	}
	if _, err := e.rollouts.Retire(ctx, "routing", 1, "i5", "again", "oncall"); !errors.Is(err, rollout.ErrAlreadyRetired) {
		t.Fatalf("second retirement = %v", err)
	}
	if _, err := e.rollouts.StopRollout(ctx, "routing", 1, "enough", "oncall"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.rollouts.Retire(ctx, "routing", 1, "i4", "late", "oncall"); !errors.Is(err, rollout.ErrNotReady) || !strings.Contains(err.Error(), "frozen") {
		t.Fatalf("retirement from a stopped release = %v", err)
	}
}

// TestRetiringACohortMemberBringsInTheNext: a fraction stage's cohort
// keeps its size when a member of it is retired, and keeps every other
// member: no instance loses an assignment.
func TestRetiringACohortMemberBringsInTheNext(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	rel := e.releaseWith(t, 50, func(s *release.Spec) {
		s.Stages = []release.Stage{{Name: "canary", Policy: quorum.Policy{Kind: quorum.Fraction, Fraction: 0.5}}}
	})
	before := rollout.Cohort(rel, 0)
	var gone string
	for id := range before {
		gone = id
		break
	}
	if _, err := e.rollouts.Retire(ctx, "routing", 1, gone, "never came back", "oncall"); err != nil {
		t.Fatal(err)
	}
	assigned := 0
	for i := range 6 {
		id := fmt.Sprintf("i%d", i)
		got := e.assignments(t, id)
		switch {
		case id == gone && got != "":
			t.Fatalf("the retired %s is still assigned %q", id, got)
		case before[id] && id != gone && got != "1:canary":
			t.Fatalf("cohort member %s lost its assignment: %q", id, got)
		case got == "1:canary":
			assigned++
		}
	}
	if assigned != len(before) {
		t.Fatalf("%d instances assigned after the retirement; the cohort had %d", assigned, len(before))
	}
}

// TestStaleAndCoverage: status shows an instance STALE for a generation it
// applied once its assignment moved past it, and reports how many members
// reported what they run, from their current boot.
func TestStaleAndCoverage(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	g1 := e.promoted(t, 10) // every instance reported HEALTHY_ACKED of 1
	if c := e.status(t, 1).Coverage; c.Members != 6 || c.Reported != 6 || c.OnRelease != 6 || c.String() != "6 of 6 members reported a digest; 6 run generation 1" {
		t.Fatalf("coverage of generation 1 = %+v (%s)", c, c)
	}
	rel := e.releaseWith(t, 50, func(s *release.Spec) {
		s.Stages = []release.Stage{
			{Name: "canary", Selector: map[string]string{"zone": "zone-a"}, Policy: quorum.Policy{Kind: quorum.All}},
			{Name: "rest", Selector: map[string]string{"zone": "zone-b"}, Policy: quorum.Policy{Kind: quorum.All}},
		}
	})
	e.ack(t, rel, "i0", "boot-1", 2, rollout.Applied)
	e.ack(t, rel, "i3", "boot-1", 2, rollout.Applied)
	// The canaries moved past generation 1: STALE for it.
	if st := e.status(t, 1); st.Stages[0].States["STALE"] != 2 || st.Stages[0].States["HEALTHY_ACKED"] != 4 || st.Coverage.OnRelease != 4 {
		t.Fatalf("generation 1 with two canaries on 2: %v, %+v", st.Stages[0].States, st.Coverage)
	}
	if c := e.status(t, 2).Coverage; c.Reported != 6 || c.OnRelease != 2 {
		t.Fatalf("coverage of generation 2 = %+v", c)
	}
	// A wrong digest is what it is: reported, and counted as a mismatch.
	e.ack(t, rel, "i0", "boot-1", 3, rollout.Applied, func(a *rollout.Ack) { a.ContentDigest = "sha256:bad" })
	if c := e.status(t, 2).Coverage; c.OnRelease != 1 || c.Mismatched != 1 || !strings.Contains(c.String(), "1 run generation 2 with another digest") {
		t.Fatalf("coverage with a wrong digest = %+v (%s)", c, c)
	}
	// The rollout stops: the canaries go back to 1, and are STALE for 2.
	if _, err := e.rollouts.StopRollout(ctx, "routing", 2, "bad", "oncall"); err != nil {
		t.Fatal(err)
	}
	if st := e.status(t, 2); st.Stages[0].States["STALE"] != 2 {
		t.Fatalf("generation 2 after the stop: %v", st.Stages[0].States)
	}
	// After a restart the instance's record describes its previous boot.
	e.register(t, "i1", "boot-2", "zone-b")
	page, err := e.rollouts.ListApplied(ctx, "routing", 0, "", 100)
	if err != nil || len(page.Records) != 6 {
		t.Fatalf("ListApplied = %+v, %v", page, err)
	}
	for _, rec := range page.Records {
		switch rec.WorkloadIdentity {
		case "i0":
			if rec.Generation != 2 || rec.ContentDigest != "sha256:bad" || !rec.CurrentBoot {
				t.Fatalf("i0 = %+v", rec)
			}
		case "i1":
			if rec.Generation != 1 || rec.ContentDigest != g1.ContentDigest || rec.CurrentBoot {
				t.Fatalf("i1 after its restart = %+v", rec)
			}
		}
	}
	if c := e.status(t, 1).Coverage; c.Reported != 5 {
		t.Fatalf("coverage after a restart = %+v", c)
	}
	first, err := e.rollouts.ListApplied(ctx, "routing", 0, "", 4)
	if err != nil || len(first.Records) != 4 || !first.More {
		t.Fatalf("first page = %+v, %v", first, err)
	}
	next, err := e.rollouts.ListApplied(ctx, "routing", first.Revision, first.Records[3].WorkloadIdentity, 4)
	if err != nil || len(next.Records) != 2 || next.More || next.Records[0].WorkloadIdentity != "i4" {
		t.Fatalf("second page = %+v, %v", next, err)
	}
}
