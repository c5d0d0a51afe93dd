// Package testclock is a clock that tests move by hand, for deadlines,
// health windows and leases: a test advances time instead of sleeping.
package testclock
