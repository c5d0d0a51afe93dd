//go:build race

package api

// raceEnabled is whether the race detector is on: it makes the
// scheduler pick among runnable goroutines at random, so that tests of
// the order in which they run can only check it without.
const raceEnabled = true
