package api

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/server/internal/auth"
	"github.com/pawlcfg/pawl/server/internal/instance"
	"github.com/pawlcfg/pawl/server/internal/pagetoken"
	"github.com/pawlcfg/pawl/server/internal/records"
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
// follows the release and rollout records through a watcher of the hub: a
// change wakes the stream, which waits until the rollout views include it,
// looks its instance up in the configs the change touched, and sends the
// set (or, with deltas, what changed) when anything did. A stream that
// fell so far behind that the change log it needs was compacted starts
// over from now with a full set, which is all an instance needs. The
// stream ends with Unavailable when the server shuts down, and when it
// stops following a shared store (its instance resumes on another
// replica).
func (h *Instances) WatchAssignments(ctx context.Context, req *connect.Request[pawlv1.WatchAssignmentsRequest], stream *connect.ServerStream[pawlv1.WatchAssignmentsResponse]) error {
	m := req.Msg
	identity := m.GetWorkloadIdentity()
	if identity == "" {
		return InvalidArgument("workload_identity is required")
	}
	if err := h.checkAfterRevision(ctx, req.Spec(), "after_revision", m.GetAfterRevision()); err != nil {
		return err
	}
	var w *watch.Watcher
	defer func() {
		if w != nil {
			w.Close()
		}
	}()
	if boot := m.GetBootId(); boot != "" {
		release, err := h.registry.Hold(ctx, identity, boot)
		if err != nil {
			return Error(h.log, req.Spec(), err)
		}
		defer release() // before the watcher closes: a stream counted open still holds
	}
	as := &assignmentStream{send: stream.Send, identity: identity, deltas: m.GetDeltas(), rollouts: h.rollouts}
	for {
		if w == nil {
			var err error
			// From now: the full set sent next is computed after the watcher
			// started, so no change between the two is missed.
			if w, err = h.hub.Watch(ctx, records.ConfigsPrefix, 0); err != nil {
				return Error(h.log, req.Spec(), err)
			}
			byConfig, rev, err := h.rollouts.AssignmentsAt(ctx, identity, max(w.StartedAt(), m.GetAfterRevision()), nil)
			if err != nil {
				return Error(h.log, req.Spec(), err)
			}
			if err := as.sendFull(byConfig, rev); err != nil {
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
		case batch.Stale != "":
			// This replica cannot follow the store: the instance must not
			// wait on it for assignments that may already exist.
			return connect.NewError(connect.CodeUnavailable, fmt.Errorf(
				"this server cannot follow its store (%s): resume on another replica with after_revision %d", batch.Stale, batch.Progress))
		case len(batch.Events) == 0:
			continue
		}
		byConfig, rev, err := h.rollouts.AssignmentsAt(ctx, identity, batch.Events[len(batch.Events)-1].Revision(), touchedConfigs(batch.Events))
		if err != nil {
			return Error(h.log, req.Spec(), err)
		}
		if err := as.sendChanges(ctx, byConfig, rev); err != nil {
			return Error(h.log, req.Spec(), err)
		}
	}
}

// checkAfterRevision refuses a revision to resume assignments after
// (field) that is not one this server has.
func (h *Instances) checkAfterRevision(ctx context.Context, spec connect.Spec, field string, after int64) error {
	if after == 0 {
		return nil
	}
	now := h.hub.Revision()
	if after > now {
		// A replica's feed may trail the store by a moment: a client
		// resuming here with a revision another replica sent it waits
		// for this one to catch up (AssignmentsAt), unless the store
		// has no such revision at all.
		rev, err := h.hub.StoreRevision(ctx)
		if err != nil {
			return Error(h.log, spec, err)
		}
		now = max(now, rev)
	}
	if after < 0 || after > now {
		return InvalidArgument("%s %d is not a revision this server has (its revision is %d): resume from a revision it sent you, or 0", field, after, now)
	}
	return nil
}

// touchedConfigs are the configs whose records the events changed.
func touchedConfigs(events []store.Event) []string {
	var out []string
	for _, ev := range events {
		config, _, _ := strings.Cut(strings.TrimPrefix(ev.KV.Key, records.ConfigsPrefix), "/")
		if !slices.Contains(out, config) {
			out = append(out, config)
		}
	}
	return out
}

// assignmentStream is what one stream (or session) sent its instance:
// per config, a key of the assignments it holds. It keeps no copy of what
// it sent: a stream of full sets computes the whole set again when
// something changed. send sends one message.
type assignmentStream struct {
	send     func(*pawlv1.WatchAssignmentsResponse) error
	identity string
	deltas   bool
	held     heldKeys // per config, the key of its assignments as sent
	rollouts *rollout.Rollouts
}

// sendFull sends every config's assignments and makes them what is held.
// Both the held keys and the message's assignments are in config order.
func (s *assignmentStream) sendFull(byConfig map[string][]rollout.Assignment, rev int64) error {
	held := make([]heldEntry, 0, len(byConfig))
	var assignments []*pawlv1.Assignment
	for _, config := range slices.Sorted(maps.Keys(byConfig)) {
		as := byConfig[config]
		held = append(held, heldEntry{config: config, key: assignmentsKey(as)})
		assignments = append(assignments, toProtoAssignments(as)...)
	}
	s.held = heldKeys{}.withChanges(held)
	return s.send(&pawlv1.WatchAssignmentsResponse{Assignments: assignments, Revision: rev, Full: true})
}

// sendChanges sends what changed of the configs computed, if anything did:
// with deltas only those configs, else the whole set again.
func (s *assignmentStream) sendChanges(ctx context.Context, byConfig map[string][]rollout.Assignment, rev int64) error {
	delta := &pawlv1.WatchAssignmentsResponse{Revision: rev}
	var changes []heldEntry
	held := s.held.cursor()
	e, ok := held.next()
	for _, config := range slices.Sorted(maps.Keys(byConfig)) {
		for ok && e.config < config {
			e, ok = held.next()
		}
		var heldKey uint64
		if ok && e.config == config {
			heldKey = e.key
		}
		as := byConfig[config]
		key := assignmentsKey(as)
		if key == heldKey {
			continue
		}
		changes = append(changes, heldEntry{config: config, key: key})
		if len(as) == 0 {
			delta.RemovedConfigIds = append(delta.RemovedConfigIds, config)
			continue
		}
		delta.Assignments = append(delta.Assignments, toProtoAssignments(as)...)
	}
	switch {
	case len(changes) == 0:
		return nil
	case s.deltas:
		s.held = s.held.withChanges(changes)
		return s.send(delta)
	}
	all, at, err := s.rollouts.AssignmentsAt(ctx, s.identity, rev, nil)
	if err != nil {
		return err
	}
	return s.sendFull(all, at)
}

func toProtoAssignments(as []rollout.Assignment) []*pawlv1.Assignment {
	out := make([]*pawlv1.Assignment, 0, len(as))
	for _, a := range as {
		out = append(out, &pawlv1.Assignment{ConfigId: a.ConfigID, Generation: a.Generation, ContentDigest: a.ContentDigest,
			ValidatorDigest: a.ValidatorDigest, Stage: a.Stage, Epoch: a.Epoch, Shadow: a.Shadow})
	}
	return out
}

// assignmentsKey is a hash of a config's assignments that differs whenever
// they do (0 for none).
func assignmentsKey(as []rollout.Assignment) uint64 {
	if len(as) == 0 {
		return 0
	}
	h := fnv.New64a()
	for _, a := range as {
		fmt.Fprintf(h, "%d/%d/%s/%v;", a.Generation, a.Epoch, a.Stage, a.Shadow)
	}
	return h.Sum64() | 1 // never 0
}

// Register implements pawl.v1.InstanceService.Register. The registration
// records its principal; with an auth file, an identity whose live
// registration another principal made is refused (PermissionDenied) and
// the attempt logged.
func (h *Instances) Register(ctx context.Context, req *connect.Request[pawlv1.RegisterRequest]) (*connect.Response[pawlv1.RegisterResponse], error) {
	rec, err := h.register(ctx, req.Msg.GetInstance(), req.Peer().Addr)
	if err != nil {
		return nil, Error(h.log, req.Spec(), err)
	}
	return connect.NewResponse(&pawlv1.RegisterResponse{
		Record:            h.toProto(rec),
		HeartbeatInterval: durationpb.New(h.registry.Lease() / 3),
	}), nil
}

// register registers in as the principal of ctx (Register and a
// session's hello); peer names the caller in the log of a refused
// takeover.
func (h *Instances) register(ctx context.Context, in *pawlv1.Instance, peer string) (instance.Record, error) {
	p, ok := auth.PrincipalFrom(ctx)
	if !ok {
		p = auth.Open()
	}
	by := instance.Registrant{Principal: p.Name, AuthMethod: p.Method, InstanceCredential: p.InstanceCredential(in.GetWorkloadIdentity())}
	rec, err := h.registry.RegisterAs(ctx, instance.Instance{
		WorkloadIdentity: in.GetWorkloadIdentity(), BootID: in.GetBootId(), Zone: in.GetZone(), Role: in.GetRole(),
		TrafficWeight: in.GetTrafficWeight(), AppVersion: in.GetAppVersion(), Labels: in.GetLabels(),
	}, by, p.Method != auth.MethodOpen)
	if errors.Is(err, instance.ErrTakeover) {
		h.log.Warn("refused an identity takeover", "principal", p.Name, "method", p.Method, "identity", in.GetWorkloadIdentity(), "peer", peer)
	}
	return rec, err
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
// A request without page_size or page_token gets every instance, as
// before pages existed; otherwise one page, every page read at the
// revision of the first.
func (h *Instances) ListInstances(ctx context.Context, req *connect.Request[pawlv1.ListInstancesRequest]) (*connect.Response[pawlv1.ListInstancesResponse], error) {
	resp := &pawlv1.ListInstancesResponse{}
	if req.Msg.GetPageSize() == 0 && req.Msg.GetPageToken() == "" {
		recs, err := h.registry.List(ctx)
		if err != nil {
			return nil, Error(h.log, req.Spec(), err)
		}
		for _, rec := range recs {
			resp.Instances = append(resp.Instances, h.toProto(rec))
		}
		return connect.NewResponse(resp), nil
	}
	size, err := PageSize(req.Msg.GetPageSize())
	if err != nil {
		return nil, err
	}
	revision, after, err := PageStart(req.Msg.GetPageToken(), instancesScope, "page_token", "the instance listing")
	if err != nil {
		return nil, err
	}
	page, err := h.registry.ListPage(ctx, revision, after, size)
	if err != nil {
		return nil, Error(h.log, req.Spec(), err)
	}
	for _, rec := range page.Records {
		resp.Instances = append(resp.Instances, h.toProto(rec))
	}
	if page.More && len(page.Records) > 0 {
		resp.NextPageToken = pagetoken.Token{Scope: instancesScope, Revision: page.Revision, After: page.Records[len(page.Records)-1].WorkloadIdentity}.Encode()
	}
	return connect.NewResponse(resp), nil
}

// instancesScope is the scope of the instance listing's page tokens.
const instancesScope = "instances"

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
		RegisteredBy:    rec.Principal, AuthMethod: rec.AuthMethod, InstanceCredential: rec.InstanceCredential,
	}
}
