//go:build !linux

package boltstore

import "os"

// preallocate gives f size bytes, read as zeros.
func preallocate(f *os.File, size int64) error { return f.Truncate(size) }

// fdatasync makes f's data durable.
func fdatasync(f *os.File) error { return f.Sync() }
