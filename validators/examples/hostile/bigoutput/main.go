// Command bigoutput is a hostile validator whose result is far over the
// output limit.
package main

import (
	"strings"

	"github.com/pawlcfg/pawl/validators/guest"
)

func init() { guest.Handle(validate) }

func main() {}

func validate(guest.Input) guest.Result {
	msg := strings.Repeat("x", 2<<20) // twice the default 1 MiB limit
	return guest.Result{Violations: []guest.Violation{{Path: "/", Message: msg, Severity: guest.SeverityError}}}
}
