package boltstore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	bolt "go.etcd.io/bbolt"

	"github.com/pawlcfg/pawl/server/internal/store"
)

var _ store.Snapshotter = (*Store)(nil)

// snapshotPattern names the files Snapshot writes in the data directory,
// which Open removes when a crash left one behind.
const snapshotPattern = "snapshot-*.tmp"

// newIncarnation returns a new random incarnation ID: 128 bits in hex.
func newIncarnation() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// ensureIncarnation returns the incarnation the meta bucket holds, storing
// a new one first when it holds none (a store created now, or by a
// release from before incarnations).
func ensureIncarnation(tx *bolt.Tx) (string, error) {
	m := tx.Bucket(bucketMeta)
	if v := m.Get(metaIncarnation); len(v) > 0 {
		return string(v), nil
	}
	id := newIncarnation()
	if err := m.Put(metaIncarnation, []byte(id)); err != nil {
		return "", err
	}
	return id, nil
}

// Snapshot implements store.Snapshotter. It waits until bbolt holds every
// change the write-ahead log held when it was called, then copies bbolt's
// file in one read transaction (bbolt's Tx.WriteTo): a consistent copy as
// of the revision that transaction sees, which holds every change answered
// before the call. The copy goes to a file in the data directory first, so
// that the read transaction lasts as long as the disk takes, not as long as
// a slow client: a long one would hold up the applier when bbolt's file
// must grow. Writes go on meanwhile.
func (s *Store) Snapshot(ctx context.Context) (*store.Snapshot, error) {
	f, err := os.CreateTemp(s.dir, snapshotPattern)
	if err != nil {
		return nil, fmt.Errorf("boltstore: snapshot: %w", err)
	}
	snap := &store.Snapshot{File: tempFile{f}}
	h := sha256.New()
	err = s.view(ctx, func(tx *bolt.Tx) error {
		snap.Status = readStatus(tx)
		n, werr := tx.WriteTo(io.MultiWriter(f, h))
		snap.Size = n
		return werr
	})
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		_ = snap.File.Close()
		return nil, fmt.Errorf("boltstore: snapshot: %w", err)
	}
	snap.Status.Incarnation = s.incarnation
	h.Sum(snap.SHA256[:0])
	return snap, nil
}

// tempFile is a snapshot's file: Close removes it.
type tempFile struct{ *os.File }

func (f tempFile) Close() error {
	err := f.File.Close()
	if rerr := os.Remove(f.Name()); rerr != nil && err == nil {
		err = rerr
	}
	return err
}

// removeSnapshotFiles removes the snapshot files a crash left in dir.
func removeSnapshotFiles(dir string) error {
	names, err := filepath.Glob(filepath.Join(dir, snapshotPattern))
	if err != nil {
		return fmt.Errorf("boltstore: look for old snapshot files: %w", err)
	}
	for _, name := range names {
		if err := os.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("boltstore: remove an old snapshot file: %w", err)
		}
	}
	return nil
}

// ErrSnapshotChecksum is the error of Restore when a snapshot's bytes do
// not match its checksum: the file is damaged or truncated.
var ErrSnapshotChecksum = errors.New("boltstore: the snapshot does not match its checksum")

// Restore creates the data directory dir from a snapshot: the bytes of
// bbolt's file (what Snapshot copies), size bytes read from r, whose
// sha256 must be sum. dir must be empty or absent. The restored store
// keeps the snapshot's revisions, keys, change log, blobs and records,
// and gets a new incarnation, which it returns in its status: watchers of
// the store copied, resuming against it, learn that it is another
// history. On failure, Restore leaves dir as it found it.
func Restore(ctx context.Context, r io.Reader, size int64, sum [32]byte, dir string) (st store.Status, err error) {
	if err := checkRestoreDir(dir); err != nil {
		return store.Status{}, err
	}
	created := false
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		created = true
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return store.Status{}, fmt.Errorf("boltstore: restore: create %s: %w", dir, err)
	}
	tmp := filepath.Join(dir, FileName+".restore")
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
			if created {
				_ = os.Remove(dir)
			}
		}
	}()
	if err := copyVerified(ctx, r, size, sum, tmp); err != nil {
		return store.Status{}, err
	}
	if st, err = reincarnate(tmp); err != nil {
		return store.Status{}, err
	}
	if err := os.Rename(tmp, filepath.Join(dir, FileName)); err != nil {
		return store.Status{}, fmt.Errorf("boltstore: restore: %w", err)
	}
	if err := (osFS{}).SyncDir(dir); err != nil {
		return store.Status{}, fmt.Errorf("boltstore: restore: %w", err)
	}
	return st, nil
}

// checkRestoreDir refuses a data directory that holds anything.
func checkRestoreDir(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("boltstore: restore: read %s: %w", dir, err)
	case len(entries) > 0:
		names := make([]string, 0, 3)
		for _, e := range entries[:min(3, len(entries))] {
			names = append(names, e.Name())
		}
		return fmt.Errorf("boltstore: restore: %s is not empty (it holds %s); restore into a new directory", dir, strings.Join(names, ", "))
	}
	return nil
}

// copyVerified copies size bytes of r to a new file at path, synced, and
// fails with ErrSnapshotChecksum unless their sha256 is sum.
func copyVerified(ctx context.Context, r io.Reader, size int64, sum [32]byte, path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("boltstore: restore: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(ctxReader{ctx, r}, size))
	if err != nil {
		return fmt.Errorf("boltstore: restore: read the snapshot: %w", err)
	}
	if n != size {
		return fmt.Errorf("%w: it ends after %d of %d bytes", ErrSnapshotChecksum, n, size)
	}
	var got [32]byte
	if h.Sum(got[:0]); got != sum {
		return fmt.Errorf("%w: its bytes hash to sha256:%x, the checksum says sha256:%x", ErrSnapshotChecksum, got, sum)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("boltstore: restore: sync %s: %w", path, err)
	}
	return f.Close()
}

// reincarnate checks the bbolt file at path (every page reachable and
// consistent, the store's buckets present) and gives it a new
// incarnation. It returns the store's status.
func reincarnate(path string) (store.Status, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 0})
	if err != nil {
		return store.Status{}, fmt.Errorf("boltstore: restore: the snapshot is not a store: %w", err)
	}
	var st store.Status
	err = db.Update(func(tx *bolt.Tx) error {
		for cerr := range tx.Check() {
			return fmt.Errorf("the snapshot's file is damaged: %w", cerr)
		}
		for _, name := range [][]byte{bucketMeta, bucketKV, bucketLog, bucketIdx} {
			if tx.Bucket(name) == nil {
				return fmt.Errorf("the snapshot has no %s bucket: it is not a Pawl store", name)
			}
		}
		st = readStatus(tx)
		st.Incarnation = newIncarnation()
		return tx.Bucket(bucketMeta).Put(metaIncarnation, []byte(st.Incarnation))
	})
	if cerr := db.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return store.Status{}, fmt.Errorf("boltstore: restore: %w", err)
	}
	return st, nil
}

// ctxReader is a reader that stops when its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
