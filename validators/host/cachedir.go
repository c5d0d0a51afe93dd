package host

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ErrUnsafeCacheDir means the compilation cache directory, one of its
// ancestors or an entry in it could be changed by someone other than this
// process's user. The cache holds native code the runtime runs without
// checking it, so whoever can write there could plant code.
var ErrUnsafeCacheDir = errors.New("validator: unsafe compilation cache directory")

// wazeroDirPrefix begins the names of the directories wazero keeps its
// compiled code in, one per wazero version, architecture and OS.
const wazeroDirPrefix = "wazero-"

// prepareCacheDir makes dir (mode 0700 where it does not exist) and
// checks, where the OS has owners and permission bits (Unix), that only
// this process's user can change the code cached in it: dir must be owned
// by the user and writable by nobody else (no group or world write bit);
// each ancestor owned by the user or root and writable by nobody else
// unless sticky (as /tmp, where nobody may rename another's entries); and
// wazero's directories in it, and their entries, owned by the user and
// writable by nobody else, and no symbolic links. It returns dir's
// absolute path with symbolic links resolved. A failed check is
// ErrUnsafeCacheDir, naming the path, its owner or mode, and the fix.
func prepareCacheDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("validator: compilation cache in %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return "", fmt.Errorf("validator: compilation cache in %s: %w", dir, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("validator: compilation cache in %s: %w", dir, err)
	}
	if err := checkOwned(real, false); err != nil {
		return "", err
	}
	for p := filepath.Dir(real); ; p = filepath.Dir(p) {
		if err := checkOwned(p, true); err != nil {
			return "", err
		}
		if filepath.Dir(p) == p {
			break
		}
	}
	return real, checkEntries(real)
}

// checkEntries checks wazero's directories in dir and their entries
// (prepareCacheDir).
func checkEntries(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("validator: compilation cache in %s: %w", dir, err)
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), wazeroDirPrefix) {
			continue
		}
		sub := filepath.Join(dir, e.Name())
		if !e.IsDir() {
			return fmt.Errorf("%w: %s is not a directory (%s): remove it", ErrUnsafeCacheDir, sub, e.Type())
		}
		if err := checkOwned(sub, false); err != nil {
			return err
		}
		files, err := os.ReadDir(sub)
		if err != nil {
			return fmt.Errorf("validator: compilation cache in %s: %w", dir, err)
		}
		for _, f := range files {
			p := filepath.Join(sub, f.Name())
			if !f.Type().IsRegular() {
				return fmt.Errorf("%w: %s is not a regular file (%s), which the runtime never writes: remove it", ErrUnsafeCacheDir, p, f.Type())
			}
			// A file another process of the user just renamed (wazero writes
			// an entry as a temporary file, then renames it) is gone: skip it.
			if err := checkOwned(p, false); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}
