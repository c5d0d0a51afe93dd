// Command membomb is a hostile validator that allocates without end.
package main

import "github.com/pawlcfg/pawl/validators/guest"

func init() { guest.Handle(validate) }

func main() {}

var hoard [][]byte

func validate(guest.Input) guest.Result {
	for {
		hoard = append(hoard, make([]byte, 1<<20))
	}
}
