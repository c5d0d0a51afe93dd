package boltstore

import (
	"fmt"
	"os"
)

// walFS is what the write-ahead log does to files: the seam through which
// a test puts a file system that loses, at a simulated power cut, every
// write and every directory change that was not synced. osFS is the real
// one.
type walFS interface {
	MkdirAll(dir string) error
	// ReadDir returns the names in dir.
	ReadDir(dir string) ([]string, error)
	ReadFile(path string) ([]byte, error)
	// OpenFile opens path as os.OpenFile does, with flags among
	// O_RDWR, O_WRONLY, O_CREATE, O_EXCL and O_TRUNC.
	OpenFile(path string, flag int) (walFile, error)
	Rename(from, to string) error
	Remove(path string) error
	// SyncDir makes the creations, renames and removals in dir durable.
	SyncDir(dir string) error
}

// walFile is an open log file.
type walFile interface {
	WriteAt(p []byte, off int64) (int, error)
	// Allocate gives the file size bytes, read as zeros where not written.
	Allocate(size int64) error
	// Sync makes the file's data and metadata durable (fsync).
	Sync() error
	// DataSync makes the file's data durable, and as much of its metadata
	// as reading the data back needs (fdatasync).
	DataSync() error
	Close() error
}

// osFS is the operating system's file system.
type osFS struct{}

func (osFS) MkdirAll(dir string) error { return os.MkdirAll(dir, 0o750) }

func (osFS) ReadDir(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names, nil
}

func (osFS) ReadFile(path string) ([]byte, error) { return os.ReadFile(path) }

func (osFS) OpenFile(path string, flag int) (walFile, error) {
	f, err := os.OpenFile(path, flag, 0o600)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) Rename(from, to string) error { return os.Rename(from, to) }

func (osFS) Remove(path string) error { return os.Remove(path) }

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("boltstore: open %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("boltstore: sync %s: %w", dir, err)
	}
	return nil
}

// osFile is an open file of osFS.
type osFile struct{ *os.File }

func (f osFile) Allocate(size int64) error { return preallocate(f.File, size) }

func (f osFile) DataSync() error { return fdatasync(f.File) }
