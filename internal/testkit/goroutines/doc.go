// Package goroutines reads this process's goroutines from its goroutine
// profile, for the tests that must see what goroutines are doing: how many
// run a function, or whether one waits where it should. The profile
// leaves out the runtime's own frames: a goroutine blocked in a select
// shows the function that selects as its innermost frame.
package goroutines
