package sdk

import (
	"errors"
	"fmt"
	"strings"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/sdk/textsafe"
	"github.com/pawlcfg/pawl/validators/host"
)

// invalidContent is the validator's refusal of a release's content: its
// message flattens the violations (the ACK's reason), and the violations
// travel in the REJECTED ACK as structured data. The violations are
// redacted of the secret values the validator marked.
type invalidContent struct {
	msg        string
	violations []host.Violation
}

func (e *invalidContent) Error() string        { return e.msg }
func (e *invalidContent) Is(target error) bool { return target == errInvalidContent }

// errAppTooOld marks a release whose minimum app version is above the
// instance's.
var errAppTooOld = errors.New("sdk: the app is older than the release's minimum")

// Bounds of the violations one REJECTED ACK carries: the server refuses
// more than maxAckViolations entries (its limit on a request's lists) and
// strings longer than maxReasonBytes (pawld --max-text-bytes is never
// less); maxViolationBytes keeps the ACK record small all the same.
const (
	maxAckViolations  = 256
	maxViolationBytes = 64 << 10
)

// rejectCode says which step refused a release, from the step's name
// and its error.
func rejectCode(step string, err error) pawlv1.RejectCode {
	switch {
	case errors.Is(err, errInvalidContent):
		return pawlv1.RejectCode_REJECT_CODE_INVALID_CONTENT
	case errors.Is(err, errUnloadable):
		return pawlv1.RejectCode_REJECT_CODE_VALIDATOR_UNLOADABLE
	case errors.Is(err, errCorrupt):
		return pawlv1.RejectCode_REJECT_CODE_DIGEST_MISMATCH
	case errors.Is(err, errAppTooOld):
		return pawlv1.RejectCode_REJECT_CODE_APP_TOO_OLD
	}
	switch step {
	case "pawl.download":
		return pawlv1.RejectCode_REJECT_CODE_DOWNLOAD_FAILED
	case "pawl.validate":
		return pawlv1.RejectCode_REJECT_CODE_VALIDATOR_FAILED
	case "pawl.apply":
		return pawlv1.RejectCode_REJECT_CODE_APPLY_FAILED
	}
	return pawlv1.RejectCode_REJECT_CODE_UNSPECIFIED
}

// ackViolations renders the violations of err (none unless the
// validator refused the content) for a REJECTED ACK, cut to fit the
// server's bounds: each path and message one line within maxReasonBytes,
// at most maxAckViolations entries and maxViolationBytes in all; when
// entries are cut, the last entry says how many.
func ackViolations(err error) []*pawlv1.Violation {
	var ic *invalidContent
	if !errors.As(err, &ic) || len(ic.violations) == 0 {
		return nil
	}
	out := make([]*pawlv1.Violation, 0, min(len(ic.violations), maxAckViolations))
	total := 0
	for i, v := range ic.violations {
		pv := &pawlv1.Violation{Path: oneLine(v.Path), Message: oneLine(v.Message), Severity: pawlv1.Severity_SEVERITY_ERROR}
		if v.Severity == "warning" {
			pv.Severity = pawlv1.Severity_SEVERITY_WARNING
		}
		size := len(pv.Path) + len(pv.Message)
		if len(out) == maxAckViolations-1 && i < len(ic.violations)-1 || total+size > maxViolationBytes {
			out = append(out, &pawlv1.Violation{Severity: pawlv1.Severity_SEVERITY_ERROR,
				Message: fmt.Sprintf("%d more violations cut (an ACK carries at most %d, %d bytes)", len(ic.violations)-i, maxAckViolations, maxViolationBytes)})
			break
		}
		total += size
		out = append(out, pv)
	}
	return out
}

// oneLine makes s one line of safe text within maxReasonBytes: the
// server takes line feeds and tabs in reasons only.
func oneLine(s string) string {
	return textsafe.Clean(strings.NewReplacer("\r\n", " ", "\n", " ", "\t", " ").Replace(s), maxReasonBytes)
}
