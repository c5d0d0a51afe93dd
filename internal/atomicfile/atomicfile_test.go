package atomicfile_test

import (
	"bytes"
	"os"
	"path/filepath"
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
