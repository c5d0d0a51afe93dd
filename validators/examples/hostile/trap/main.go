// Command trap is a hostile validator that panics in the middle of a call.
package main

import "github.com/pawlcfg/pawl/validators/guest"

func init() { guest.Handle(validate) }

func main() {}

func validate(in guest.Input) guest.Result {
	if string(in.Config) == "ok" {
		return guest.Result{Valid: true}
	}
	panic("trap: validator gave up on purpose")
}
