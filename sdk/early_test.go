package sdk_test

import (
	"testing"
	"time"

	"github.com/pawlcfg/pawl/internal/testkit/testclock"
	"github.com/pawlcfg/pawl/server"
)

// TestAHealthyReportTheServerTookTooEarlyIsSentAgain: the server's clock
// stands still (as a replica's that lags the one that took APPLIED, or one
// stepped back), so by its measure the health window has not passed when
// the instance's healthy report arrives, and the report is stored without
// counting. The instance sends it again, held longer; once the server's
// clock moves past the window, it counts. (Sent once, it never would: the
// stage would wait until the deadline stopped the rollout.)
func TestAHealthyReportTheServerTookTooEarlyIsSentAgain(t *testing.T) {
	clock := testclock.New(time.Now())
	h := newHarness(t, server.WithClock(clock.Now))
	h.client("svc-1")
	h.waitRegistered("svc-1")
	rel := h.release(50, nil)
	h.awaitAcks(rel.GetGeneration(), func(s map[string][]string) bool { return reported(s, "svc-1", "HEALTHY_ACKED") })
	_, acks := h.acks(rel.GetGeneration())
	for _, a := range acks {
		if a.GetCounted() && a.GetHealthOk() && a.GetState().String() == "INSTANCE_STATE_HEALTHY_ACKED" {
			t.Fatalf("a healthy report counted before the server's clock moved: %v", a)
		}
	}
	clock.Advance(time.Minute)
	if a := h.awaitHealthy(rel.GetGeneration(), "svc-1"); a.GetHeld().AsDuration() <= rel.GetSpec().GetHealthWindow().AsDuration() {
		t.Fatalf("the report that counted says it held %s, no longer than the first", a.GetHeld().AsDuration())
	}
}
