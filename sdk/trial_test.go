package sdk_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/sdk"
)

// watchEvery is the health interval of these tests' canaries: short, so
// that a failure after the window is seen at once; the tests await what
// the server records, never the interval.
const watchEvery = 20 * time.Millisecond

// sickFor returns a health check that fails for generation gen once sick
// is set, saying why.
func sickFor(gen int64, sick *atomic.Bool, why string) sdk.Option {
	return sdk.WithHealthCheck(func(ctx context.Context, s *sdk.Snapshot) error {
		if s.Generation == gen && sick.Load() {
			return errors.New(why)
		}
		return nil
	})
}

// canaryOnly is a plan of one stage, taking the instances labelled
// canary=true, that tolerates no rejection.
func canaryOnly(spec *pawlv1.ReleaseSpec) {
	spec.Stages = []*pawlv1.Stage{
		{Name: "canary", Selector: map[string]string{"canary": "true"}, Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}},
	}
}

var canaryLabel = sdk.WithLabels(map[string]string{"canary": "true"})

// awaitHealthy waits until id's healthy HEALTHY_ACKED of gen counted (its
// health window passed) and returns it.
func (h *harness) awaitHealthy(gen int64, id string) *pawlv1.Ack {
	h.t.Helper()
	var healthy *pawlv1.Ack
	h.awaitKV("/_pawl/acks/", func() bool {
		_, acks := h.acks(gen)
		for _, a := range acks {
			if a.GetWorkloadIdentity() == id && a.GetState() == pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED && a.GetHealthOk() && a.GetCounted() {
				healthy = a
				return true
			}
		}
		return false
	})
	return healthy
}

// awaitStopped waits until gen's status has a stop record and returns
// the status. (It waits for the record, not the state: status reads the
// release's state apart from the rest, so the two may disagree for a
// moment.)
func (h *harness) awaitStopped(gen int64) *pawlv1.GetRolloutStatusResponse {
	h.t.Helper()
	var st *pawlv1.GetRolloutStatusResponse
	h.awaitKV("/_pawl/", func() bool {
		st = h.status(gen)
		return st.GetStop() != nil
	})
	return st
}

// lastAckOf returns id's last ACK in st but a STALE, which follows once
// the instance went back to the active generation (sooner now that the
// release comes with the assignment).
func lastAckOf(t *testing.T, st *pawlv1.GetRolloutStatusResponse, id string) *pawlv1.Ack {
	t.Helper()
	acks := st.GetAcks()
	for i := len(acks) - 1; i >= 0; i-- {
		if acks[i].GetWorkloadIdentity() == id && acks[i].GetState() != pawlv1.InstanceState_INSTANCE_STATE_STALE {
			return acks[i]
		}
	}
	t.Fatalf("no ACK of %s", id)
	return nil
}

// checkLateFailure checks that the canary's failure after its window
// stopped the rollout at its stage: its last report (but a STALE) is an
// unhealthy HEALTHY_ACKED of the apply that passed the window, counted,
// saying why.
func checkLateFailure(t *testing.T, st *pawlv1.GetRolloutStatusResponse, id string, healthy *pawlv1.Ack, why string) {
	t.Helper()
	if stop := st.GetStop(); stop.GetStage() != "canary" || stop.GetManual() {
		t.Fatalf("the rollout stopped by %+v, want the canary stage", stop)
	}
	late := lastAckOf(t, st, id)
	if late.GetState() != pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED || late.GetHealthOk() || !late.GetCounted() ||
		late.GetApplySequence() != healthy.GetApplySequence() || late.GetBootId() != healthy.GetBootId() ||
		!strings.Contains(late.GetReason(), why) {
		t.Fatalf("the report after the window = %v; want an unhealthy HEALTHY_ACKED of apply %d, counted, with %q", late, healthy.GetApplySequence(), why)
	}
}

// TestACanaryWhoseHealthCheckFailsAfterItsWindowStopsTheRollout: a
// canary passes its health window, the next stage takes the rest, and
// then the canary's health check starts failing: it reports at once, the
// rollout stops at the canary stage with the reason, and both instances
// go back to the active generation.
func TestACanaryWhoseHealthCheckFailsAfterItsWindowStopsTheRollout(t *testing.T) {
	h := newHarness(t)
	var sick atomic.Bool
	canary := h.client("c0", canaryLabel, sdk.WithHealthInterval(watchEvery), sickFor(2, &sick, "the payment provider times out"))
	rest := h.client("i1", sdk.WithHealthInterval(watchEvery))
	h.waitRegistered("c0", "i1")
	h.release(50, nil)
	h.awaitHealthy(1, "c0")
	h.awaitHealthy(1, "i1")
	h.promote(1)

	h.release(70, canaryThenEveryone)
	healthy := h.awaitHealthy(2, "c0")
	sick.Store(true)
	st := h.awaitStopped(2)
	checkLateFailure(t, st, "c0", healthy, "after the health window: health check failed: the payment provider times out")
	has(t, canary, 1)
	has(t, rest, 1)
}

// TestACanaryWhoseErrorRateRisesAfterItsWindowStopsTheRollout: a canary
// serves well through its health window, within its stage's error
// budget, then its requests start failing: the error rate it measures
// breaks the budget, it reports at once with the measurements, and the
// rollout stops.
func TestACanaryWhoseErrorRateRisesAfterItsWindowStopsTheRollout(t *testing.T) {
	h := newHarness(t)
	c := h.client("c0", canaryLabel, sdk.WithHealthInterval(watchEvery))
	h.waitRegistered("c0")
	var failing atomic.Bool
	srv := httptest.NewServer(c.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() {
			http.Error(w, "upstream gone", http.StatusBadGateway)
		}
	})))
	defer srv.Close()
	serve := func(n int) {
		for range n {
			resp, err := http.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
	}
	maxErrors := 0.1
	h.release(50, func(spec *pawlv1.ReleaseSpec) {
		canaryOnly(spec)
		spec.Stages[0].Budget = &pawlv1.HealthBudget{MaxErrorRate: &maxErrors}
		spec.HealthWindow = durationpb.New(2 * time.Second)
	})
	h.awaitAcks(1, func(s map[string][]string) bool { return reported(s, "c0", "APPLIED") })
	serve(10) // within the window: all well
	healthy := h.awaitHealthy(1, "c0")
	if m := healthy.GetHealth(); m == nil || m.GetErrorRate() != 0 {
		t.Fatalf("the window's report = %v", healthy)
	}
	failing.Store(true)
	serve(10)
	st := h.awaitStopped(1)
	checkLateFailure(t, st, "c0", healthy, "after the health window: error rate")
	if late := lastAckOf(t, st, "c0"); late.GetHealth().GetErrorRate() <= maxErrors || !strings.Contains(late.GetReason(), "over the budget of 0.1") {
		t.Fatalf("the report after the window carries %v (%s)", late.GetHealth(), late.GetReason())
	}
}

// TestTheApplicationReportsACanaryUnhealthy: ReportUnhealthy sends the
// application's own finding at once, which stops the rollout with its
// reason; it refuses an empty reason, and says ErrNotOnTrial when no
// canary is on trial (nothing applied yet, or the rollout is over).
func TestTheApplicationReportsACanaryUnhealthy(t *testing.T) {
	h := newHarness(t)
	c := h.client("c0", canaryLabel, sdk.WithHealthInterval(time.Hour)) // no recheck: only the application reports
	h.waitRegistered("c0")
	if err := c.ReportUnhealthy(h.ctx, "routing", "too early"); !errors.Is(err, sdk.ErrNotOnTrial) {
		t.Fatalf("before any release: %v, want ErrNotOnTrial", err)
	}
	h.release(50, canaryOnly)
	healthy := h.awaitHealthy(1, "c0")
	if err := c.ReportUnhealthy(h.ctx, "routing", " "); err == nil || errors.Is(err, sdk.ErrNotOnTrial) {
		t.Fatalf("an empty reason: %v", err)
	}
	over := sdk.TrialOver(c, "routing")
	if over == nil {
		t.Fatal("the canary is not on trial after its window")
	}
	const why = "checkout's error rate went from 0.1% to 7%"
	if err := c.ReportUnhealthy(h.ctx, "routing", why); err != nil {
		t.Fatal(err)
	}
	st := h.awaitStopped(1)
	checkLateFailure(t, st, "c0", healthy, "reported by the application: "+why)
	select {
	case <-over:
	case <-h.ctx.Done():
		t.Fatal("the trial did not end after the failure was reported")
	}
	if err := c.ReportUnhealthy(h.ctx, "routing", "again"); !errors.Is(err, sdk.ErrNotOnTrial) {
		t.Fatalf("after the stop: %v, want ErrNotOnTrial", err)
	}
	if n := len(h.status(1).GetAcks()); n != len(st.GetAcks()) {
		t.Fatalf("%d ACKs after the refused reports, %d before", n, len(st.GetAcks()))
	}
}

// TestAPromotedReleaseIsNoLongerWatched: once the assignment stream says
// the canary was promoted, its health is no longer rollout evidence:
// the watch ends, a failing health check sends nothing, and the
// application's report is refused with ErrNotOnTrial.
func TestAPromotedReleaseIsNoLongerWatched(t *testing.T) {
	h := newHarness(t)
	var sick atomic.Bool
	c := h.client("c0", canaryLabel, sdk.WithHealthInterval(watchEvery), sickFor(1, &sick, "sick after promotion"))
	h.waitRegistered("c0")
	h.release(50, canaryOnly)
	h.awaitHealthy(1, "c0")
	over := sdk.TrialOver(c, "routing")
	if over == nil {
		t.Fatal("the canary is not on trial after its window")
	}
	h.promote(1)
	select {
	case <-over:
	case <-h.ctx.Done():
		t.Fatal("the watch did not end with the promotion")
	}
	sick.Store(true)
	if err := c.ReportUnhealthy(h.ctx, "routing", "after promotion"); !errors.Is(err, sdk.ErrNotOnTrial) {
		t.Fatalf("after the promotion: %v, want ErrNotOnTrial", err)
	}
	// The next release goes through; generation 1 got no health report
	// after its HEALTHY_ACKED (its STALE, once generation 2 is applied,
	// may or may not have arrived yet: it says the instance moved on).
	h.release(60, canaryOnly)
	h.awaitHealthy(2, "c0")
	states, _ := h.acks(1)
	got := states["c0"]
	if n := len(got); n > 0 && got[n-1] == "STALE" {
		got = got[:n-1]
	}
	if !slices.Equal(got, everyStep) {
		t.Fatalf("generation 1's reports: %v, want %v (and STALE)", states["c0"], everyStep)
	}
}

// TestAHealthIntervalMustBePositive: a zero or negative interval is
// refused by New, naming the option.
func TestAHealthIntervalMustBePositive(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		c, err := sdk.New(context.Background(), "http://127.0.0.1:1", sdk.WithWorkloadIdentity("i0"), sdk.WithHealthInterval(d))
		if err == nil {
			c.Close()
			t.Fatalf("WithHealthInterval(%s) was accepted", d)
		}
		if !strings.Contains(err.Error(), "WithHealthInterval("+d.String()+"): must be positive") {
			t.Fatalf("WithHealthInterval(%s): %v", d, err)
		}
	}
}
