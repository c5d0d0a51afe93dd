package api

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/server/internal/store"
)

// Maintenance implements pawl.v1.MaintenanceService: the store's status
// and alarms, and backups of the store.
type Maintenance struct {
	store store.Store
	usage store.UsageReporter
	log   *slog.Logger
}

var _ pawlv1connect.MaintenanceServiceHandler = (*Maintenance)(nil)

// NewMaintenance returns the MaintenanceService handler of st, whose size
// and alarms usage reports (nil: none).
func NewMaintenance(st store.Store, usage store.UsageReporter, log *slog.Logger) *Maintenance {
	return &Maintenance{store: st, usage: usage, log: log}
}

// Status implements pawl.v1.MaintenanceService.Status.
func (h *Maintenance) Status(ctx context.Context, req *connect.Request[pawlv1.StatusRequest]) (*connect.Response[pawlv1.StatusResponse], error) {
	st, err := h.store.Status(ctx)
	if err != nil {
		return nil, Error(h.log, req.Spec(), err)
	}
	resp := &pawlv1.StatusResponse{Revision: st.Revision, CompactRevision: st.CompactRevision, Incarnation: st.Incarnation}
	if h.usage != nil {
		u, err := h.usage.Usage(ctx)
		if err != nil {
			return nil, Error(h.log, req.Spec(), err)
		}
		resp.SizeBytes, resp.QuotaBytes, resp.QuotaReserveBytes = u.Used, u.Quota, u.Reserve
		if a := u.Alarm; a != nil {
			resp.Alarms = append(resp.Alarms, &pawlv1.Alarm{Kind: pawlv1.AlarmKind_ALARM_KIND_NOSPACE, Since: timestamppb.New(a.Since),
				Message: fmt.Sprintf("the store reached its storage quota: it holds %d bytes of %d (--quota-bytes); writes that add bytes are refused "+
					"until deletes and compaction take it under %d bytes (nine tenths of the quota), when the alarm clears by itself; or raise --quota-bytes",
					u.Used, u.Quota, store.Quota{Bytes: u.Quota}.LowWater())})
		}
	}
	return connect.NewResponse(resp), nil
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
