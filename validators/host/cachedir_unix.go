//go:build unix

package host

import (
	"fmt"
	"os"
	"syscall"
)

// checkOwned checks that path is owned by this process's user (or, for an
// ancestor, root) and writable by nobody else (for an ancestor, unless it
// is sticky). It does not follow a symbolic link at path.
func checkOwned(path string, ancestor bool) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("validator: compilation cache: %w", err)
	}
	uid := os.Geteuid()
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != uid && (!ancestor || st.Uid != 0) {
		return fmt.Errorf("%w: %s is owned by uid %d, not by this process's user (uid %d), who alone may write the compiled code it runs: "+
			"chown it, or choose another directory", ErrUnsafeCacheDir, path, st.Uid, uid)
	}
	if fi.Mode().Perm()&0o022 != 0 && (!ancestor || fi.Mode()&os.ModeSticky == 0) {
		return fmt.Errorf("%w: %s is writable by its group or others (mode %04o): whoever can write it could plant compiled code the runtime runs; "+
			"chmod go-w it, or choose another directory", ErrUnsafeCacheDir, path, fi.Mode().Perm())
	}
	return nil
}
