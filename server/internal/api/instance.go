package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/server/internal/instance"
	"github.com/pawlcfg/pawl/server/internal/rollout"
	"github.com/pawlcfg/pawl/server/internal/store"
	"github.com/pawlcfg/pawl/server/internal/watch"
)

// Instances is the InstanceService handler.
type Instances struct {
	registry *instance.Registry
	rollouts *rollout.Rollouts
	hub      *watch.Hub
	log      *slog.Logger
}

var _ pawlv1connect.InstanceServiceHandler = (*Instances)(nil)

// NewInstances returns the InstanceService handler; assignment streams
// follow the hub.
func NewInstances(r *instance.Registry, ro *rollout.Rollouts, hub *watch.Hub, log *slog.Logger) *Instances {
	return &Instances{registry: r, rollouts: ro, hub: hub, log: log}
}

// WatchAssignments implements pawl.v1.InstanceService.WatchAssignments. It
// recomputes the instance's assignments after every change to release or
// rollout records and sends the set when it differs from the last one
// sent. A stream that fell so far behind that the change log it needs was
// compacted starts over from now with the current set, which is all an
// instance needs. The stream ends with Unavailable when the server shuts
// down.
func (h *Instances) WatchAssignments(ctx context.Context, req *connect.Request[pawlv1.WatchAssignmentsRequest], stream *connect.ServerStream[pawlv1.WatchAssignmentsResponse]) error {
	identity := req.Msg.GetWorkloadIdentity()
	if identity == "" {
		return InvalidArgument("workload_identity is required")
	}
	var w *watch.Watcher
	defer func() {
		if w != nil {
			w.Close()
		}
	}()
	last := "\x00nothing sent yet" // no real set renders like this
	for {
		if w == nil {
			var err error
			// From now: the set sent next is computed after registering,
			// so no change between the two is missed.
			if w, err = h.hub.Watch(ctx, store.SystemPrefix+"configs/", 0); err != nil {
				return Error(h.log, req.Spec(), err)
			}
			if err := h.sendIfChanged(ctx, stream, identity, w.StartedAt(), &last); err != nil {
				return err
			}
		}
		batch, err := w.Next(ctx)
		var compacted *store.CompactedError
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.As(err, &compacted):
			h.log.Info("assignment stream fell behind the change log's compaction; it starts over from the current set",
				"identity", identity, "needed", compacted.Requested, "compact_revision", compacted.CompactRevision)
			w.Close()
			w = nil
			continue
		case err != nil:
			return Error(h.log, req.Spec(), err)
		case len(batch.Events) == 0:
			continue
		}
		if err := h.sendIfChanged(ctx, stream, identity, batch.Events[len(batch.Events)-1].Revision(), &last); err != nil {
			return err
		}
	}
}

// sendIfChanged sends the instance's set, computed once the rollout views
// are at revision rev, if it differs from the last one sent.
func (h *Instances) sendIfChanged(ctx context.Context, stream *connect.ServerStream[pawlv1.WatchAssignmentsResponse], identity string, rev int64, last *string) error {
	as, rev, err := h.rollouts.AssignmentsAt(ctx, identity, rev)
	if err != nil {
		return Error(h.log, connect.Spec{Procedure: pawlv1connect.InstanceServiceWatchAssignmentsProcedure}, err)
	}
	resp := &pawlv1.WatchAssignmentsResponse{Revision: rev}
	var key strings.Builder
	for _, a := range as {
		resp.Assignments = append(resp.Assignments, &pawlv1.Assignment{ConfigId: a.ConfigID, Generation: a.Generation,
			ContentDigest: a.ContentDigest, ValidatorDigest: a.ValidatorDigest, Stage: a.Stage, Epoch: a.Epoch, Shadow: a.Shadow})
		fmt.Fprintf(&key, "%s/%d/%d/%s/%v;", a.ConfigID, a.Generation, a.Epoch, a.Stage, a.Shadow)
	}
	if key.String() == *last {
		return nil
	}
	*last = key.String()
	return stream.Send(resp)
}

// Register implements pawl.v1.InstanceService.Register.
func (h *Instances) Register(ctx context.Context, req *connect.Request[pawlv1.RegisterRequest]) (*connect.Response[pawlv1.RegisterResponse], error) {
	in := req.Msg.GetInstance()
	rec, err := h.registry.Register(ctx, instance.Instance{
		WorkloadIdentity: in.GetWorkloadIdentity(), BootID: in.GetBootId(), Zone: in.GetZone(), Role: in.GetRole(),
		TrafficWeight: in.GetTrafficWeight(), AppVersion: in.GetAppVersion(), Labels: in.GetLabels(),
	})
	if err != nil {
		return nil, Error(h.log, req.Spec(), err)
	}
	return connect.NewResponse(&pawlv1.RegisterResponse{
		Record:            h.toProto(rec),
		HeartbeatInterval: durationpb.New(h.registry.Lease() / 3),
	}), nil
}

// Heartbeat implements pawl.v1.InstanceService.Heartbeat.
func (h *Instances) Heartbeat(ctx context.Context, req *connect.Request[pawlv1.HeartbeatRequest]) (*connect.Response[pawlv1.HeartbeatResponse], error) {
	rec, err := h.registry.Heartbeat(ctx, req.Msg.GetWorkloadIdentity(), req.Msg.GetBootId())
	if err != nil {
		return nil, Error(h.log, req.Spec(), err)
	}
	return connect.NewResponse(&pawlv1.HeartbeatResponse{Record: h.toProto(rec)}), nil
}

// ListInstances implements pawl.v1.InstanceService.ListInstances.
func (h *Instances) ListInstances(ctx context.Context, req *connect.Request[pawlv1.ListInstancesRequest]) (*connect.Response[pawlv1.ListInstancesResponse], error) {
	recs, err := h.registry.List(ctx)
	if err != nil {
		return nil, Error(h.log, req.Spec(), err)
	}
	resp := &pawlv1.ListInstancesResponse{}
	for _, rec := range recs {
		resp.Instances = append(resp.Instances, h.toProto(rec))
	}
	return connect.NewResponse(resp), nil
}

func (h *Instances) toProto(rec instance.Record) *pawlv1.InstanceRecord {
	return &pawlv1.InstanceRecord{
		Instance: &pawlv1.Instance{
			WorkloadIdentity: rec.WorkloadIdentity, BootId: rec.BootID, Zone: rec.Zone, Role: rec.Role,
			TrafficWeight: rec.TrafficWeight, AppVersion: rec.AppVersion, Labels: rec.Labels,
		},
		LeaseExpiresAt:  timestamppb.New(rec.LeaseExpiresAt),
		Live:            rec.Live(h.registry.Now()),
		RegisteredAt:    timestamppb.New(rec.RegisteredAt),
		MembershipEpoch: rec.MembershipEpoch,
	}
}
