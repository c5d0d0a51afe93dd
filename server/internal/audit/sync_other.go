//go:build !linux

package audit

import "os"

// fdatasync makes f's data durable.
func fdatasync(f *os.File) error { return f.Sync() }
