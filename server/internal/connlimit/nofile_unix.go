//go:build unix

package connlimit

import "syscall"

// FileLimit is the process's limit of open files (RLIMIT_NOFILE, the soft
// limit, which Go raises to the hard limit at start), and whether there is
// one.
func FileLimit() (uint64, bool) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur >= 1<<62 { // 1<<62 and above: RLIM_INFINITY
		return 0, false
	}
	return uint64(r.Cur), true
}
