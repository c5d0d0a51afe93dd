//go:build race

package host_test

// raceEnabled is whether the race detector is on: it makes wazero's
// compiler 10 to 30 times slower.
const raceEnabled = true
