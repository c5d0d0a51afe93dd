package sdk_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/pawlcfg/pawl/sdk"
)

// TestLongReasonsAreCutNotLost: a health check whose error is 10 KB long
// and holds an escape sequence makes an unhealthy HEALTHY_ACKED; the SDK
// cuts its reason to the server's least text bound and cleans it, so the
// server takes the ACK instead of refusing it.
func TestLongReasonsAreCutNotLost(t *testing.T) {
	h := newHarness(t)
	h.client("i0", sdk.WithHealthCheck(func(ctx context.Context, s *sdk.Snapshot) error {
		return errors.New("\x1b[2J" + strings.Repeat("the database is unreachable; ", 400))
	}))
	h.waitRegistered("i0")
	h.release(50, nil)
	h.awaitAcks(1, func(s map[string][]string) bool { return reported(s, "i0", "HEALTHY_ACKED") })
	_, acks := h.acks(1)
	last := acks[len(acks)-1]
	reason := last.GetReason()
	if last.GetHealthOk() || len(reason) > 4096 || !strings.HasSuffix(reason, "bytes cut)") || strings.Contains(reason, "\x1b") {
		t.Fatalf("the unhealthy ACK's reason is %d bytes: %q…%q", len(reason), reason[:min(80, len(reason))], reason[max(0, len(reason)-40):])
	}
}
