package boltstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pawlcfg/pawl/server/internal/store"
)

// snapshotBytes takes a snapshot of s and returns its bytes and checksum.
func snapshotBytes(t *testing.T, s *Store) ([]byte, *store.Snapshot) {
	t.Helper()
	snap, err := s.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer snap.File.Close()
	b, err := io.ReadAll(snap.File)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(b)) != snap.Size {
		t.Fatalf("snapshot of %d bytes says %d", len(b), snap.Size)
	}
	return b, snap
}

func TestSnapshotRestoreKeepsRevisionsWithANewIncarnation(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	for i := range 20 {
		if _, err := s.Put(ctx, store.Put{Key: fmt.Sprintf("/s/%d", i%7), Value: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.PutBlob(ctx, "module", store.Blob{ID: "sha256:x", Meta: []byte("m"), Data: []byte("wasm")}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutRecords(ctx, "lease", []store.Record{{ID: "i1", Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	before, err := s.Status(ctx)
	if err != nil || before.Incarnation == "" {
		t.Fatalf("status %+v, %v; want an incarnation", before, err)
	}
	b, snap := snapshotBytes(t, s)
	if snap.Status.Revision != 20 || snap.Status.Incarnation != before.Incarnation {
		t.Fatalf("snapshot status %+v; want revision 20, incarnation %s", snap.Status, before.Incarnation)
	}
	if left, _ := filepath.Glob(filepath.Join(s.dir, snapshotPattern)); len(left) != 0 {
		t.Fatalf("closing the snapshot left %v", left)
	}
	if _, err := s.Put(ctx, store.Put{Key: "/s/after", Value: []byte("x")}); err != nil {
		t.Fatal(err)
	}

	dir := filepath.Join(t.TempDir(), "restored")
	st, err := Restore(ctx, bytes.NewReader(b), snap.Size, snap.SHA256, dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Revision != 20 || st.Incarnation == "" || st.Incarnation == before.Incarnation {
		t.Fatalf("restored status %+v; want revision 20 and a new incarnation (old %s)", st, before.Incarnation)
	}
	r := open(t, dir)
	got, err := r.Status(ctx)
	if err != nil || got.Revision != 20 || got.Incarnation != st.Incarnation {
		t.Fatalf("restored store opens at %+v, %v; want %+v", got, err, st)
	}
	for i := range 7 {
		want, _, err := s.Get(ctx, fmt.Sprintf("/s/%d", i), 20)
		if err != nil {
			t.Fatal(err)
		}
		kv, _, err := r.Get(ctx, want.Key, 0)
		if err != nil || !bytes.Equal(kv.Value, want.Value) || kv.ModRevision != want.ModRevision || kv.CreateRevision != want.CreateRevision || kv.Version != want.Version {
			t.Fatalf("restored %s = %+v, %v; want %+v", want.Key, kv, err, want)
		}
	}
	if _, _, err := r.Get(ctx, "/s/after", 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a put after the snapshot is in the restore: %v", err)
	}
	if blob, err := r.GetBlob(ctx, "module", "sha256:x", true); err != nil || string(blob.Data) != "wasm" {
		t.Fatalf("restored blob %+v, %v", blob, err)
	}
	if recs, _, err := r.ListRecords(ctx, "lease", "", 10); err != nil || len(recs) != 1 {
		t.Fatalf("restored records %+v, %v", recs, err)
	}
	res, err := r.Put(ctx, store.Put{Key: "/s/next"})
	if err != nil || res.Revision != 21 {
		t.Fatalf("first put after restore: revision %d, %v; want 21", res.Revision, err)
	}
}

func TestRestoreRefusesDamageAndNonEmptyDirectories(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	if _, err := s.Put(ctx, store.Put{Key: "/a", Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	b, snap := snapshotBytes(t, s)
	flipped := bytes.Clone(b)
	flipped[len(flipped)/2] ^= 0x40
	for name, tc := range map[string]struct {
		data []byte
		want error
	}{
		"flipped":   {flipped, ErrSnapshotChecksum},
		"truncated": {b[:len(b)-100], ErrSnapshotChecksum},
	} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "d")
			_, err := Restore(ctx, bytes.NewReader(tc.data), snap.Size, snap.SHA256, dir)
			if !errors.Is(err, tc.want) {
				t.Fatalf("restore: %v; want %v", err, tc.want)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a failed restore left %s: %v", dir, err)
			}
		})
	}
	t.Run("not empty", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "keep"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Restore(ctx, bytes.NewReader(b), snap.Size, snap.SHA256, dir)
		if err == nil || !strings.Contains(err.Error(), "not empty") {
			t.Fatalf("restore into a non-empty directory: %v", err)
		}
		if names, _ := os.ReadDir(dir); len(names) != 1 {
			t.Fatalf("the refused restore changed the directory: %v", names)
		}
	})
}
