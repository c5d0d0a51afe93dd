package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"os"
	"path/filepath"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
)

func snapshotCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Back up the server's embedded store",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "save FILE",
		Short: "Save a consistent copy of the store, checked against its sha256, to FILE (restore it with pawld restore)",
		Long: `Streams a consistent copy of the server's embedded store as of one revision
(keys and their retained history, validator modules, records) and writes it to
FILE, followed by its sha256. The bytes go to a temporary file beside FILE,
which is renamed to FILE only once their checksum matches the server's.
A Redis store cannot be saved this way: back up Redis itself.
--timeout bounds how long the server may stay silent, not the whole copy.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.snapshotSave(cmd.Context(), args[0])
		},
	})
	return cmd
}

// savedSnapshot is what snapshot save prints.
type savedSnapshot struct {
	File            string `json:"file"`
	Revision        int64  `json:"revision"`
	CompactRevision int64  `json:"compact_revision"`
	Size            int64  `json:"size"`
	SHA256          string `json:"sha256"`
	Incarnation     string `json:"incarnation"`
}

// snapshotSave streams a snapshot into a temporary file beside path,
// checks its size and sha256 against the server's, appends the sha256
// (the layout pawld restore reads) and renames the file to path.
func (g *globals) snapshotSave(ctx context.Context, path string) (err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The copy may take long; the server may not stay silent for long.
	idle := time.AfterFunc(g.timeout, func() {
		cancel(fmt.Errorf("no message from %s for %s (--timeout)", g.server, g.timeout))
	})
	defer idle.Stop()

	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.part")
	if err != nil {
		return fmt.Errorf("snapshot save: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	client, opts := g.transport()
	stream, err := pawlv1connect.NewMaintenanceServiceClient(client, strings.TrimSuffix(g.server, "/"), opts...).
		Snapshot(ctx, connect.NewRequest(&pawlv1.SnapshotRequest{}))
	if err != nil {
		return err
	}
	defer stream.Close()
	var (
		started  *pawlv1.SnapshotStarted
		finished *pawlv1.SnapshotFinished
		h        hash.Hash = sha256.New()
		written  int64
	)
	for finished == nil && stream.Receive() {
		idle.Reset(g.timeout)
		switch m := stream.Msg(); {
		case m.GetStarted() != nil && started == nil:
			started = m.GetStarted()
		case started == nil:
			return errors.New("snapshot save: the server sent data before saying what it sends")
		case m.GetFinished() != nil:
			finished = m.GetFinished()
		default:
			chunk := m.GetChunk()
			if written += int64(len(chunk)); written > started.GetSize() {
				return fmt.Errorf("snapshot save: the server sent more than the %d bytes it announced", started.GetSize())
			}
			h.Write(chunk)
			if _, err := tmp.Write(chunk); err != nil {
				return fmt.Errorf("snapshot save: %w", err)
			}
		}
	}
	if finished == nil {
		if cause := context.Cause(ctx); ctx.Err() != nil && cause != ctx.Err() { // the idle timer, not an interrupt
			return fmt.Errorf("snapshot save: %w", cause)
		}
		if err := stream.Err(); err != nil {
			return err
		}
		return fmt.Errorf("snapshot save: the stream ended after %d bytes, before the checksum", written)
	}
	sum := h.Sum(nil)
	got := fmt.Sprintf("sha256:%x", sum)
	if written != started.GetSize() || got != finished.GetSha256() {
		return fmt.Errorf("snapshot save: the copy does not match the server's checksum (%d bytes hashing to %s; the server sent %d bytes hashing to %s); nothing was saved",
			written, got, started.GetSize(), finished.GetSha256())
	}
	if _, err := tmp.Write(sum); err != nil {
		return fmt.Errorf("snapshot save: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("snapshot save: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("snapshot save: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("snapshot save: %w", err)
	}
	if d, derr := os.Open(filepath.Dir(path)); derr == nil {
		_ = d.Sync() // the rename survives a crash
		_ = d.Close()
	}
	out := savedSnapshot{File: path, Revision: started.GetRevision(), CompactRevision: started.GetCompactRevision(),
		Size: written, SHA256: got, Incarnation: started.GetIncarnation()}
	if g.output == "json" {
		b, err := json.Marshal(out)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(g.stdout, "%s\n", b)
		return err
	}
	_, err = fmt.Fprintf(g.stdout, "saved %s: revision %d, %d bytes, %s\n", path, out.Revision, out.Size, out.SHA256)
	return err
}
