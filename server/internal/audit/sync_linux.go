package audit

import (
	"os"
	"syscall"
)

// fdatasync makes f's data durable, and its size: what reading the
// appended lines back needs.
func fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
