package api

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/server/internal/store"
)

// Maintenance implements pawl.v1.MaintenanceService: backups of the store.
type Maintenance struct {
	store store.Store
	log   *slog.Logger
}

var _ pawlv1connect.MaintenanceServiceHandler = (*Maintenance)(nil)

// NewMaintenance returns the MaintenanceService handler of st.
func NewMaintenance(st store.Store, log *slog.Logger) *Maintenance {
	return &Maintenance{store: st, log: log}
}

// snapshotChunk is the size of a snapshot's chunks: large enough that the
// per-message cost vanishes, well under any message limit.
const snapshotChunk = 1 << 20

// Snapshot implements pawl.v1.MaintenanceService.Snapshot. It answers
// FailedPrecondition for a store that cannot copy itself (Redis). Any
// number of snapshots may run at once, each with a file of its own in the
// data directory until it ends.
func (h *Maintenance) Snapshot(ctx context.Context, req *connect.Request[pawlv1.SnapshotRequest], stream *connect.ServerStream[pawlv1.SnapshotResponse]) error {
	snapper, ok := h.store.(store.Snapshotter)
	if !ok {
		return newError(connect.CodeFailedPrecondition,
			"this server keeps its data in Redis, which it cannot copy: back up Redis itself (RDB snapshots or the AOF, with BGSAVE or a replica)")
	}
	snap, err := snapper.Snapshot(ctx)
	if err != nil {
		return Error(h.log, req.Spec(), err)
	}
	defer snap.File.Close()
	st := snap.Status
	if err := stream.Send(&pawlv1.SnapshotResponse{Kind: &pawlv1.SnapshotResponse_Started{Started: &pawlv1.SnapshotStarted{
		Revision: st.Revision, CompactRevision: st.CompactRevision, Size: snap.Size, Incarnation: st.Incarnation,
	}}}); err != nil {
		return err
	}
	buf := make([]byte, snapshotChunk)
	var sent int64
	for {
		n, err := io.ReadFull(snap.File, buf)
		if n > 0 {
			sent += int64(n)
			if err := stream.Send(&pawlv1.SnapshotResponse{Kind: &pawlv1.SnapshotResponse_Chunk{Chunk: buf[:n]}}); err != nil {
				return err
			}
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return Error(h.log, req.Spec(), fmt.Errorf("read the snapshot: %w", err))
		}
	}
	if sent != snap.Size {
		return Error(h.log, req.Spec(), fmt.Errorf("the snapshot file holds %d bytes, not %d", sent, snap.Size))
	}
	return stream.Send(&pawlv1.SnapshotResponse{Kind: &pawlv1.SnapshotResponse_Finished{Finished: &pawlv1.SnapshotFinished{
		Sha256: fmt.Sprintf("sha256:%x", snap.SHA256),
	}}})
}
