//go:build unix

package host_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pawlcfg/pawl/validators/host"
)

// TestCacheDirMustBeOnlyOurs: a compilation cache directory that does not
// exist is made 0700; one that someone else could write (its mode, an
// ancestor's, a planted entry's, its owner) is refused with
// ErrUnsafeCacheDir naming the path and the fix, since whoever can write
// it could plant native code the runtime runs.
func TestCacheDirMustBeOnlyOurs(t *testing.T) {
	ctx := context.Background()
	start := func(dir string) error {
		r, err := host.New(ctx, host.WithCacheDir(dir))
		if err == nil {
			_ = r.Close(ctx)
		}
		return err
	}
	mkdir := func(p string, mode os.FileMode) string {
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		return p
	}

	t.Run("made 0700", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "a", "cache")
		if err := start(dir); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("the new cache directory: %v, %v; want mode 0700", fi.Mode(), err)
		}
	})
	t.Run("accepted", func(t *testing.T) {
		base := t.TempDir()
		for _, dir := range []string{
			mkdir(filepath.Join(base, "shared"), 0o755),
			filepath.Join(mkdir(filepath.Join(base, "sticky"), os.ModeSticky|0o777), "cache"),
		} {
			if err := start(dir); err != nil {
				t.Errorf("%s: %v", dir, err)
			}
		}
		link := filepath.Join(base, "link")
		if err := os.Symlink(filepath.Join(base, "shared"), link); err != nil {
			t.Fatal(err)
		}
		if err := start(link); err != nil {
			t.Errorf("through a link to a good directory: %v", err)
		}
	})

	for _, c := range []struct {
		name string
		dir  func(base string) string
		says string
	}{
		{"world-writable", func(b string) string { return mkdir(filepath.Join(b, "c"), 0o777) }, "(mode 0777)"},
		{"group-writable", func(b string) string { return mkdir(filepath.Join(b, "c"), 0o770) }, "(mode 0770)"},
		{"world-writable ancestor", func(b string) string {
			mkdir(filepath.Join(b, "open"), 0o777)
			return mkdir(filepath.Join(b, "open", "c"), 0o700)
		}, "/open is writable by its group or others (mode 0777)"},
		{"planted writable entry", func(b string) string {
			dir := mkdir(filepath.Join(b, "c"), 0o700)
			sub := mkdir(filepath.Join(dir, "wazero-v1-planted"), 0o700)
			if err := os.WriteFile(filepath.Join(sub, "0123abcd"), []byte("code"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(filepath.Join(sub, "0123abcd"), 0o666); err != nil {
				t.Fatal(err)
			}
			return dir
		}, "/0123abcd is writable by its group or others (mode 0666)"},
		{"writable wazero directory", func(b string) string {
			dir := mkdir(filepath.Join(b, "c"), 0o700)
			mkdir(filepath.Join(dir, "wazero-v1-planted"), 0o777)
			return dir
		}, "/wazero-v1-planted is writable by its group or others (mode 0777)"},
		{"planted link", func(b string) string {
			dir := mkdir(filepath.Join(b, "c"), 0o700)
			sub := mkdir(filepath.Join(dir, "wazero-v1-planted"), 0o700)
			if err := os.Symlink("/etc/passwd", filepath.Join(sub, "0123abcd")); err != nil {
				t.Fatal(err)
			}
			return dir
		}, "/0123abcd is not a regular file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := start(c.dir(t.TempDir()))
			if !errors.Is(err, host.ErrUnsafeCacheDir) || !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), "choose another directory") && !strings.Contains(err.Error(), "remove it") {
				t.Fatalf("New: %v; want ErrUnsafeCacheDir saying %q", err, c.says)
			}
		})
	}

	t.Run("owned by another user", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("only root can give a directory away")
		}
		dir := mkdir(filepath.Join(t.TempDir(), "c"), 0o700)
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		err := start(dir)
		if !errors.Is(err, host.ErrUnsafeCacheDir) || !strings.Contains(err.Error(), "is owned by uid 65534, not by this process's user (uid 0)") {
			t.Fatalf("New: %v; want ErrUnsafeCacheDir naming the owner", err)
		}
	})
}
