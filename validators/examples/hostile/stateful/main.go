// Command stateful is a hostile validator whose verdict depends on the
// calls before it on the same instance: it accepts the first config an
// instance sees and rejects every other one. The host cannot tell; the
// conformance kit (validators/abitest) can.
package main

import "github.com/pawlcfg/pawl/validators/guest"

func init() { guest.Handle(validate) }

func main() {}

var first []byte

func validate(in guest.Input) guest.Result {
	if first == nil {
		first = append([]byte{}, in.Config...)
	}
	if string(in.Config) == string(first) {
		return guest.Result{Valid: true}
	}
	return guest.Result{Violations: []guest.Violation{{Message: "not the first config this instance saw", Severity: guest.SeverityError}}}
}
