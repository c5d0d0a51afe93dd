// Package atomicfile replaces files so that a reader sees the old content
// or the new, never a mix, and a crash leaves one of the two: the new bytes
// go to a temporary file in the same directory, which is synced, renamed
// over the target, and the directory is synced so the rename survives.
//
// WriteIn does all of it inside an os.Root: a name can never leave the
// root, whether by "..", an absolute path or a symbolic link planted in
// the directory (a link that points outside makes the write fail). The
// temporary file's name has a fixed, short length, so a target whose name
// is near the file system's limit (255 bytes) can still be written.
package atomicfile

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// tempPrefix starts every temporary file's name: 12 bytes, then 16 hex
// digits.
const tempPrefix = ".atomicfile-"

// IsTemp reports whether a file name (its last element) is one of this
// package's temporary files, which a directory walker should skip.
func IsTemp(name string) bool { return strings.HasPrefix(path.Base(name), tempPrefix) }

// Write replaces path with data, creating parent directories (0o755) as
// needed; the file gets mode perm.
func Write(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("atomicfile: create %s: %w", dir, err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("atomicfile: open %s: %w", dir, err)
	}
	defer root.Close()
	return WriteIn(root, filepath.Base(path), data, perm)
}

// DirMode is the mode WriteIn gives the directories it creates for files
// of mode perm: perm with the search (x) bit beside every read bit, so
// 0o600 gives 0o700, 0o640 gives 0o750 and 0o644 gives 0o755.
func DirMode(perm os.FileMode) os.FileMode {
	perm &= os.ModePerm
	return perm | (perm&0o444)>>2
}

// WriteIn replaces the file name (slash-separated, relative to root) with
// data, creating its parent directories under root (with DirMode(perm)) as
// needed; the file gets mode perm exactly (the umask does not apply). A
// name that is not local (empty, absolute, with a ".." element), or that
// reaches outside root through a symbolic link, fails and writes nothing.
func WriteIn(root *os.Root, name string, data []byte, perm os.FileMode) error {
	if !filepath.IsLocal(name) {
		return fmt.Errorf("atomicfile: %q is not a path inside %s", name, root.Name())
	}
	name = filepath.Clean(name)
	dir := filepath.Dir(name)
	if dir != "." {
		if err := root.MkdirAll(dir, DirMode(perm)); err != nil {
			return fmt.Errorf("atomicfile: create %s: %w", dir, err)
		}
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmpName := filepath.Join(dir, tempPrefix+hex.EncodeToString(rnd[:]))
	tmp, err := root.OpenFile(tmpName, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("atomicfile: temporary file for %s: %w", name, err)
	}
	fail := func(step string, err error) error {
		_ = tmp.Close()
		_ = root.Remove(tmpName)
		return fmt.Errorf("atomicfile: %s %s: %w", step, name, err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fail("write", err)
	}
	if err := tmp.Chmod(perm); err != nil {
		return fail("chmod", err)
	}
	if err := tmp.Sync(); err != nil {
		return fail("sync", err)
	}
	if err := tmp.Close(); err != nil {
		_ = root.Remove(tmpName)
		return fmt.Errorf("atomicfile: close %s: %w", name, err)
	}
	if err := root.Rename(tmpName, name); err != nil {
		_ = root.Remove(tmpName)
		return fmt.Errorf("atomicfile: rename over %s: %w", name, err)
	}
	d, err := root.Open(dir)
	return syncOpened(d, err, dir)
}

// SyncDir makes a new name in dir (a rename, a file created) durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	return syncOpened(d, err, dir)
}

// syncOpened syncs and closes directory d, opened as dir (or not: err).
func syncOpened(d *os.File, err error, dir string) error {
	if err != nil {
		return fmt.Errorf("atomicfile: open %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("atomicfile: sync %s: %w", dir, err)
	}
	return nil
}
