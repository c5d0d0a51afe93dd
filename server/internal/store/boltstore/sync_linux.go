package boltstore

import (
	"os"
	"syscall"
)

// preallocate gives f size bytes of disk space, read as zeros.
func preallocate(f *os.File, size int64) error {
	if err := syscall.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		return f.Truncate(size) // a file system without fallocate
	}
	return nil
}

// fdatasync makes f's data durable, and only as much of its metadata as
// reading the data back needs.
func fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
