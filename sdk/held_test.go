package sdk_test

import (
	"testing"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/sdk"
)

// TestAHealthyReportSaysHowLongTheInstanceHeldTheApply checks what the
// server's health window rests on besides its own clocks: the SDK's
// HEALTHY_ACKED carries held, measured by the process's monotonic clock,
// at least the release's health window, and the app version it runs.
func TestAHealthyReportSaysHowLongTheInstanceHeldTheApply(t *testing.T) {
	h := newHarness(t)
	h.client("svc-1", sdk.WithAppVersion("2.3.0"))
	h.waitRegistered("svc-1")
	rel := h.release(50, nil)
	window := rel.GetSpec().GetHealthWindow().AsDuration()
	h.awaitAcks(rel.GetGeneration(), func(s map[string][]string) bool { return reported(s, "svc-1", "HEALTHY_ACKED") })
	_, acks := h.acks(rel.GetGeneration())
	for _, a := range acks {
		if a.GetState() != pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED {
			continue
		}
		if !a.GetCounted() || a.GetHeld().AsDuration() < window || a.GetAppVersion() != "2.3.0" {
			t.Fatalf("HEALTHY_ACKED = %v: want it counted, with held at least the window (%s) and app version 2.3.0", a, window)
		}
		return
	}
	t.Fatal("no HEALTHY_ACKED was stored")
}
