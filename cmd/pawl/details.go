package main

import (
	"fmt"
	"io"
	"strings"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/sdk/pawlerr"
)

// printDetails prints, under an error's message, what its details say
// (docs/ERRORS.md): the violations of rejected content one per line, and
// the limit, the key's revision or the active pointer that refused the
// call, in the form a script can cut.
func printDetails(w io.Writer, err error) {
	if r, ok := pawlerr.RejectedFrom(err); ok {
		for _, v := range r.GetViolations() {
			fmt.Fprintln(w, violationLine(v))
		}
	}
	if l, ok := pawlerr.LimitFrom(err); ok {
		fmt.Fprintf(w, "  limit %s: %d %s, the request %d\n", l.GetLimit(), l.GetLimitValue(), l.GetUnit(), l.GetValue())
	}
	if m, ok := pawlerr.RevisionMismatchFrom(err); ok {
		fmt.Fprintf(w, "  key %s: mod revision %d, expected %d\n", m.GetKey(), m.GetCurrentModRevision(), m.GetExpectedModRevision())
	}
	if p, ok := pawlerr.PointerMovedFrom(err); ok {
		fmt.Fprintf(w, "  pointer %s: generation %d epoch %d, expected generation %d epoch %d\n", p.GetConfigId(),
			p.GetCurrent().GetGeneration(), p.GetCurrent().GetEpoch(), p.GetExpectedGeneration(), p.GetExpectedEpoch())
	}
}

// violationLine renders one violation, indented: its severity, where
// ("(document)" for the whole content) and what.
func violationLine(v *pawlv1.Violation) string {
	path := v.GetPath()
	if path == "" {
		path = "(document)"
	}
	return fmt.Sprintf("  %s %s: %s", strings.ToLower(strings.TrimPrefix(v.GetSeverity().String(), "SEVERITY_")), path, v.GetMessage())
}
