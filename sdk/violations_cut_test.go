package sdk

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/validators/host"
)

// TestViolationsAreCutToTheServersBounds: a validator's 1,000 violations
// of 10 KB, with line feeds, tabs and an escape sequence, become at most
// 256 one-line entries within the text bound and 64 KiB in all, the last
// saying how many were cut; a rejection by another step carries none, and
// every step's error maps to its reject code.
func TestViolationsAreCutToTheServersBounds(t *testing.T) {
	var vs []host.Violation
	for i := range 1000 {
		vs = append(vs, host.Violation{Path: fmt.Sprintf("/items/%d", i), Message: "line one\nline\ttwo \x1b[2J" + strings.Repeat("x", 10_000), Severity: "error"})
	}
	out := ackViolations(fmt.Errorf("validate: %w", &invalidContent{msg: "the validator rejected the content", violations: vs}))
	total := 0
	for _, v := range out {
		total += len(v.GetPath()) + len(v.GetMessage())
		if len(v.GetMessage()) > maxReasonBytes || strings.ContainsAny(v.GetMessage(), "\n\t\x1b") {
			t.Fatalf("a violation of %d bytes: %q…", len(v.GetMessage()), v.GetMessage()[:40])
		}
	}
	if len(out) > maxAckViolations || total > maxViolationBytes+200 {
		t.Fatalf("%d violations, %d bytes", len(out), total)
	}
	if last := out[len(out)-1].GetMessage(); !strings.HasPrefix(last, fmt.Sprintf("%d more violations cut", 1000-(len(out)-1))) {
		t.Fatalf("the last violation is %q", last)
	}

	few := ackViolations(&invalidContent{violations: vs[:300]})
	if len(few) > maxAckViolations {
		t.Fatalf("300 violations became %d", len(few))
	}
	short := make([]host.Violation, 300)
	for i := range short {
		short[i] = host.Violation{Path: fmt.Sprintf("/%d", i), Message: "bad", Severity: "warning"}
	}
	cut := ackViolations(&invalidContent{violations: short})
	if len(cut) != maxAckViolations || cut[0].GetSeverity() != pawlv1.Severity_SEVERITY_WARNING ||
		cut[255].GetMessage() != "45 more violations cut (an ACK carries at most 256, 65536 bytes)" {
		t.Fatalf("300 short violations: %d, last %q", len(cut), cut[len(cut)-1].GetMessage())
	}
	if exact := ackViolations(&invalidContent{violations: short[:256]}); len(exact) != 256 || exact[255].GetPath() != "/255" {
		t.Fatalf("256 violations are all sent: %d", len(exact))
	}
	if got := ackViolations(errors.New("download failed")); got != nil {
		t.Fatalf("a download failure carries violations %v", got)
	}

	for _, c := range []struct {
		step string
		err  error
		want pawlv1.RejectCode
	}{
		{"pawl.validate", &invalidContent{}, pawlv1.RejectCode_REJECT_CODE_INVALID_CONTENT},
		{"pawl.validate", mark(errors.New("x"), errUnloadable), pawlv1.RejectCode_REJECT_CODE_VALIDATOR_UNLOADABLE},
		{"pawl.validate", errors.New("trap"), pawlv1.RejectCode_REJECT_CODE_VALIDATOR_FAILED},
		{"pawl.verify", mark(errors.New("x"), errCorrupt), pawlv1.RejectCode_REJECT_CODE_DIGEST_MISMATCH},
		{"pawl.verify", mark(errors.New("x"), errAppTooOld), pawlv1.RejectCode_REJECT_CODE_APP_TOO_OLD},
		{"pawl.download", errors.New("x"), pawlv1.RejectCode_REJECT_CODE_DOWNLOAD_FAILED},
		{"pawl.apply", errors.New("x"), pawlv1.RejectCode_REJECT_CODE_APPLY_FAILED},
	} {
		if got := rejectCode(c.step, c.err); got != c.want {
			t.Errorf("%s %v: %s, want %s", c.step, c.err, got, c.want)
		}
	}
}
