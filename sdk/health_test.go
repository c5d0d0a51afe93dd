package sdk_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/sdk"
)

// TestTheHealthWindowReportsWhatTheMiddlewareMeasured: requests served
// through the middleware during the health window, half of them failing,
// give the HEALTHY_ACKED an error rate of 0.5, which breaks the stage's
// budget; a failing health check makes the report unhealthy.
func TestTheHealthWindowReportsWhatTheMiddlewareMeasured(t *testing.T) {
	h := newHarness(t)
	var sick atomic.Bool
	c := h.client("i0", sdk.WithHealthCheck(func(ctx context.Context, s *sdk.Snapshot) error {
		if sick.Load() {
			return errors.New("the database is unreachable")
		}
		return nil
	}))
	h.waitRegistered("i0")
	srv := httptest.NewServer(c.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fail" {
			http.Error(w, "boom", http.StatusInternalServerError)
		}
	})))
	defer srv.Close()
	maxErrors := 0.1
	budgeted := func(spec *pawlv1.ReleaseSpec) {
		spec.HealthWindow = durationpb.New(2 * time.Second)
		spec.Stages[0].Budget = &pawlv1.HealthBudget{MaxErrorRate: &maxErrors}
	}
	h.release(50, budgeted)
	h.awaitAcks(1, func(s map[string][]string) bool { return reported(s, "i0", "APPLIED") })
	for i := range 10 {
		path := "/ok"
		if i%2 == 0 {
			path = "/fail"
		}
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	h.awaitAcks(1, func(s map[string][]string) bool { return reported(s, "i0", "HEALTHY_ACKED") })
	_, acks := h.acks(1)
	last := acks[len(acks)-1]
	if m := last.GetHealth(); m == nil || m.GetErrorRate() != 0.5 || !last.GetHealthOk() ||
		!strings.Contains(last.GetBudgetBreach(), "error rate 0.5 is over the budget of 0.1") {
		t.Fatalf("HEALTHY_ACKED = %v", last)
	}

	sick.Store(true)
	h.release(60, nil)
	h.awaitAcks(2, func(s map[string][]string) bool { return reported(s, "i0", "HEALTHY_ACKED") })
	_, acks = h.acks(2)
	last = acks[len(acks)-1]
	if last.GetHealthOk() || !strings.Contains(last.GetReason(), "health check failed: the database is unreachable") {
		t.Fatalf("HEALTHY_ACKED with a failing health check = %v", last)
	}
}

// TestReportOutcomeFeedsTheHealthWindow: a service without the middleware
// (a queue consumer) reports its outcomes through ReportOutcome, half of
// them failures; the HEALTHY_ACKED carries an error rate of 0.5 and the
// breach of the stage's budget.
func TestReportOutcomeFeedsTheHealthWindow(t *testing.T) {
	h := newHarness(t)
	c := h.client("i0")
	h.waitRegistered("i0")
	maxErrors := 0.1
	h.release(50, func(spec *pawlv1.ReleaseSpec) {
		spec.HealthWindow = durationpb.New(2 * time.Second)
		spec.Stages[0].Budget = &pawlv1.HealthBudget{MaxErrorRate: &maxErrors}
	})
	h.awaitAcks(1, func(s map[string][]string) bool { return reported(s, "i0", "APPLIED") })
	for i := range 10 {
		c.ReportOutcome(context.Background(), time.Millisecond, i%2 == 1)
	}
	h.awaitAcks(1, func(s map[string][]string) bool { return reported(s, "i0", "HEALTHY_ACKED") })
	last := h.lastAckOf(1, "i0")
	if m := last.GetHealth(); m == nil || m.GetErrorRate() != 0.5 ||
		!strings.Contains(last.GetBudgetBreach(), "error rate 0.5 is over the budget of 0.1") {
		t.Fatalf("HEALTHY_ACKED = %v", last)
	}
}

// TestAHealthCheckFailingInTheWindowIsReportedAtOnce: with an hour-long
// health window, a health check that starts failing after the apply is
// polled every health interval and its failure reported at once, as an
// unhealthy HEALTHY_ACKED, not at the window's end.
func TestAHealthCheckFailingInTheWindowIsReportedAtOnce(t *testing.T) {
	h := newHarness(t)
	var sick atomic.Bool
	h.client("i0", sdk.WithHealthInterval(watchEvery), sdk.WithHealthCheck(func(ctx context.Context, s *sdk.Snapshot) error {
		if sick.Load() {
			return errors.New("the queue is backing up")
		}
		return nil
	}))
	h.waitRegistered("i0")
	h.release(50, func(spec *pawlv1.ReleaseSpec) { spec.HealthWindow = durationpb.New(time.Hour) })
	h.awaitAcks(1, func(s map[string][]string) bool { return reported(s, "i0", "APPLIED") })
	sick.Store(true)
	h.awaitAcks(1, func(s map[string][]string) bool { return reported(s, "i0", "HEALTHY_ACKED") })
	if last := h.lastAckOf(1, "i0"); last.GetHealthOk() || !strings.Contains(last.GetReason(), "health check failed: the queue is backing up") {
		t.Fatalf("HEALTHY_ACKED = %v", last)
	}
}
