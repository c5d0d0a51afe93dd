//go:build !unix

package connlimit

// FileLimit reports no limit of open files where the platform has none to
// read.
func FileLimit() (uint64, bool) { return 0, false }
