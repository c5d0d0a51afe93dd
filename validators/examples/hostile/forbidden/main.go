// Command forbidden is a hostile validator that imports a host function
// outside the allowed WASI subset; the host refuses it at load.
package main

import "github.com/pawlcfg/pawl/validators/guest"

func init() { guest.Handle(validate) }

func main() {}

func validate(guest.Input) guest.Result {
	if escape() != 0 {
		return guest.Result{Valid: true}
	}
	return guest.Result{}
}
