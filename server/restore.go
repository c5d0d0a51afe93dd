package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/pawlcfg/pawl/server/internal/store/boltstore"
)

// SnapshotChecksumSize is the length of the checksum at the end of a
// snapshot file: a snapshot file is the bytes MaintenanceService.Snapshot
// streams (a copy of the embedded store's bbolt file), followed by their
// sha256, as `pawl snapshot save` writes it (the layout of etcd's
// snapshots).
const SnapshotChecksumSize = 32

// ErrSnapshotChecksum is the error of Restore for a snapshot file whose
// bytes do not match its checksum: it is damaged or truncated.
var ErrSnapshotChecksum = boltstore.ErrSnapshotChecksum

// Restored describes a data directory that Restore created.
type Restored struct {
	// Revision is the store's revision: the snapshot's.
	Revision int64
	// CompactRevision is the store's compact revision.
	CompactRevision int64
	// Incarnation is the restored store's new incarnation.
	Incarnation string
}

// Restore creates the data directory dir of an embedded store from the
// snapshot file at path (see SnapshotChecksumSize). It refuses a file
// whose checksum does not match, with ErrSnapshotChecksum, and a
// directory that exists and is not empty. The store keeps the snapshot's
// keys, revisions, change log, validator modules and records, and gets a
// new incarnation: watchers of the store the snapshot was taken of are
// told, when they resume against this one, to read it afresh. The audit
// log is not in a snapshot; the restored directory starts a new one. On
// failure, dir is left as it was.
func Restore(ctx context.Context, path, dir string) (Restored, error) {
	f, err := os.Open(path)
	if err != nil {
		return Restored{}, fmt.Errorf("server: restore: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Restored{}, fmt.Errorf("server: restore: %w", err)
	}
	size := fi.Size() - SnapshotChecksumSize
	if size <= 0 {
		return Restored{}, fmt.Errorf("server: restore %s: %w: the file has %d bytes, too few for a snapshot and its checksum", path, ErrSnapshotChecksum, fi.Size())
	}
	var sum [SnapshotChecksumSize]byte
	if _, err := f.ReadAt(sum[:], size); err != nil {
		return Restored{}, fmt.Errorf("server: restore: read the checksum of %s: %w", path, err)
	}
	st, err := boltstore.Restore(ctx, io.NewSectionReader(f, 0, size), size, sum, dir)
	if err != nil {
		if errors.Is(err, ErrSnapshotChecksum) {
			err = fmt.Errorf("%w (is %s a whole snapshot file, as pawl snapshot save wrote it?)", err, path)
		}
		return Restored{}, fmt.Errorf("server: restore %s: %w", path, err)
	}
	return Restored{Revision: st.Revision, CompactRevision: st.CompactRevision, Incarnation: st.Incarnation}, nil
}
