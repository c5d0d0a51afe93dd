package atomicfile_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pawlcfg/pawl/internal/atomicfile"
)

func TestWriteReplacesAndLeavesNoTemporaryFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a", "b", "config.json")
	for _, content := range [][]byte{[]byte(`{"v":1}`), []byte(`{"v":2, "longer": true}`), nil} {
		if err := atomicfile.Write(path, content, 0o640); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, content) {
			t.Fatalf("read %q, %v; want %q", got, err, content)
		}
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != 0o640 {
			t.Fatalf("mode = %v, %v", fi.Mode(), err)
		}
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil || len(entries) != 1 {
		t.Fatalf("directory holds %v, %v; want only the file", entries, err)
	}
}

func TestWriteIntoAnUnwritableDirectoryFailsAndKeepsTheOldFile(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes into read-only directories")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "config")
	if err := atomicfile.Write(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
	if err := atomicfile.Write(path, []byte("new"), 0o644); err == nil {
		t.Fatal("write into a read-only directory succeeded")
	}
	if got, _ := os.ReadFile(path); string(got) != "old" {
		t.Fatalf("file = %q", got)
	}
}

// TestWriteInStaysInsideTheRoot: names that leave the root, directly or
// through a symbolic link planted in it, fail and write nothing outside;
// a name of 255 bytes (the limit of one element) is written, whatever the
// temporary file's name; directories get the file mode with search bits.
func TestWriteInStaysInsideTheRoot(t *testing.T) {
	base := t.TempDir()
	dir, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
	for _, d := range []string{dir, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if err := os.Symlink(outside, filepath.Join(dir, "planted")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"../outside/x", "/etc/x", "planted/x", "a/../../outside/x", "", "."} {
		if err := atomicfile.WriteIn(root, name, []byte("escape"), 0o644); err == nil {
			t.Errorf("WriteIn(%q) succeeded", name)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("written outside the root: %v", entries)
	}
	long := strings.Repeat("n", 255)
	if err := atomicfile.WriteIn(root, "sub/"+long, []byte("v"), 0o640); err != nil {
		t.Fatalf("a 255-byte name: %v", err)
	}
	for p, want := range map[string]os.FileMode{"sub/" + long: 0o640, "sub": 0o750} {
		fi, err := os.Stat(filepath.Join(dir, p))
		if err != nil || fi.Mode().Perm() != want {
			t.Fatalf("%s: %v, %v; want mode %v", p, fi, err, want)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "sub"))
	if len(entries) != 1 {
		t.Fatalf("sub holds %v; want only the file", entries)
	}
}
