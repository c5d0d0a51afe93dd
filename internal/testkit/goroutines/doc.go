// Package goroutines reads this process's goroutines from its goroutine
// profile, for the tests that must see what goroutines are doing: how many
// run a function, or whether some wait where they should.
package goroutines
