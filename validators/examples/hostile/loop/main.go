// Command loop is a hostile validator that never returns.
package main

import "github.com/pawlcfg/pawl/validators/guest"

func init() { guest.Handle(validate) }

func main() {}

var sink int

func validate(guest.Input) guest.Result {
	for i := 0; ; i++ {
		sink = i
	}
}
