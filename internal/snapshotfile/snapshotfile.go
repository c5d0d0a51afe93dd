// Package snapshotfile writes the snapshot files of `pawl snapshot save`:
// the bytes MaintenanceService.Snapshot streams, checked against the sha256
// the server sends, followed by that sha256 (32 bytes), which
// `pawld restore` checks again. It is shared by the CLI and its tests.
package snapshotfile

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"os"
	"path/filepath"
	"time"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
)

// ErrIdle is the error of Save when the server stayed silent too long.
var ErrIdle = errors.New("snapshotfile: the server stopped sending")

// Saved describes a snapshot file Save wrote.
type Saved struct {
	File            string `json:"file"`
	Revision        int64  `json:"revision"`
	CompactRevision int64  `json:"compact_revision"`
	Size            int64  `json:"size"`
	SHA256          string `json:"sha256"`
	Incarnation     string `json:"incarnation"`
}

// Save streams a snapshot from client into a temporary file beside path,
// checks its size and sha256 against what the server announced, appends
// the sha256 (the layout pawld restore reads: server.SnapshotChecksumSize)
// and renames the file to path, synced. It fails, leaving no file, when
// the stream breaks, the bytes do not match, or the server stays silent
// for idle; server names the server in that error.
func Save(ctx context.Context, client pawlv1connect.MaintenanceServiceClient, server, path string, idle time.Duration) (_ Saved, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The copy may take long; the server may not stay silent for long.
	timer := time.AfterFunc(idle, func() {
		cancel(fmt.Errorf("%w: no message from %s for %s", ErrIdle, server, idle))
	})
	defer timer.Stop()

	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.part")
	if err != nil {
		return Saved{}, fmt.Errorf("snapshotfile: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	stream, err := client.Snapshot(ctx, connect.NewRequest(&pawlv1.SnapshotRequest{}))
	if err != nil {
		return Saved{}, err
	}
	defer stream.Close()
	var (
		started  *pawlv1.SnapshotStarted
		finished *pawlv1.SnapshotFinished
		h        hash.Hash = sha256.New()
		written  int64
	)
	for finished == nil && stream.Receive() {
		timer.Reset(idle)
		switch m := stream.Msg(); {
		case m.GetStarted() != nil && started == nil:
			started = m.GetStarted()
		case started == nil:
			return Saved{}, errors.New("snapshotfile: the server sent data before saying what it sends")
		case m.GetFinished() != nil:
			finished = m.GetFinished()
		default:
			chunk := m.GetChunk()
			if written += int64(len(chunk)); written > started.GetSize() {
				return Saved{}, fmt.Errorf("snapshotfile: the server sent more than the %d bytes it announced", started.GetSize())
			}
			h.Write(chunk)
			if _, err := tmp.Write(chunk); err != nil {
				return Saved{}, fmt.Errorf("snapshotfile: %w", err)
			}
		}
	}
	if finished == nil {
		if cause := context.Cause(ctx); ctx.Err() != nil && cause != ctx.Err() { // the idle timer, not an interrupt
			return Saved{}, fmt.Errorf("snapshotfile: %w", cause)
		}
		if err := stream.Err(); err != nil {
			return Saved{}, err
		}
		return Saved{}, fmt.Errorf("snapshotfile: the stream ended after %d bytes, before the checksum", written)
	}
	sum := h.Sum(nil)
	got := fmt.Sprintf("sha256:%x", sum)
	if written != started.GetSize() || got != finished.GetSha256() {
		return Saved{}, fmt.Errorf("snapshotfile: the copy does not match the server's checksum (%d bytes hashing to %s; the server sent %d bytes hashing to %s); nothing was saved",
			written, got, started.GetSize(), finished.GetSha256())
	}
	if _, err := tmp.Write(sum); err != nil {
		return Saved{}, fmt.Errorf("snapshotfile: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return Saved{}, fmt.Errorf("snapshotfile: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return Saved{}, fmt.Errorf("snapshotfile: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return Saved{}, fmt.Errorf("snapshotfile: %w", err)
	}
	if d, derr := os.Open(filepath.Dir(path)); derr == nil {
		_ = d.Sync() // the rename survives a crash
		_ = d.Close()
	}
	return Saved{File: path, Revision: started.GetRevision(), CompactRevision: started.GetCompactRevision(),
		Size: written, SHA256: got, Incarnation: started.GetIncarnation()}, nil
}
