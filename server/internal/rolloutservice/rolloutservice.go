// Package rolloutservice implements pawl.v1.ReleaseService and
// pawl.v1.InstanceService over the release and instance packages.
package rolloutservice

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
	"github.com/pawlcfg/pawl/server/internal/apierr"
	"github.com/pawlcfg/pawl/server/internal/instance"
	"github.com/pawlcfg/pawl/server/internal/quorum"
	"github.com/pawlcfg/pawl/server/internal/release"
	"github.com/pawlcfg/pawl/server/internal/rollout"
	"github.com/pawlcfg/pawl/server/internal/store"
	"github.com/pawlcfg/pawl/server/internal/watch"
)

// ActorHeader names who is calling; it is recorded as the creator.
const ActorHeader = "Pawl-Actor"

// Releases is the ReleaseService handler.
type Releases struct {
	releases *release.Releases
	rollouts *rollout.Rollouts
	log      *slog.Logger
}

var _ pawlv1connect.ReleaseServiceHandler = (*Releases)(nil)

// NewReleases returns the ReleaseService handler; rollouts give each
// release its state.
func NewReleases(r *release.Releases, ro *rollout.Rollouts, log *slog.Logger) *Releases {
	return &Releases{releases: r, rollouts: ro, log: log}
}

// CreateRelease implements pawl.v1.ReleaseService.CreateRelease.
func (h *Releases) CreateRelease(ctx context.Context, req *connect.Request[pawlv1.CreateReleaseRequest]) (*connect.Response[pawlv1.CreateReleaseResponse], error) {
	spec, err := fromProtoSpec(req.Msg.GetSpec())
	if err != nil {
		return nil, err
	}
	by := actor(req)
	rel, err := h.releases.Create(ctx, spec, by)
	var rejected *release.RejectedError
	if errors.As(err, &rejected) {
		return nil, rejectedError(rejected)
	}
	if err != nil {
		return nil, apierr.Connect(h.log, req.Spec().Procedure, err)
	}
	h.log.Info("release created", "config", rel.ConfigID, "generation", rel.Generation, "content_digest", rel.ContentDigest,
		"members", len(rel.Membership), "actor", by)
	return connect.NewResponse(&pawlv1.CreateReleaseResponse{Release: toProtoRelease(rel, release.StateCandidate)}), nil
}

// GetRelease implements pawl.v1.ReleaseService.GetRelease.
func (h *Releases) GetRelease(ctx context.Context, req *connect.Request[pawlv1.GetReleaseRequest]) (*connect.Response[pawlv1.GetReleaseResponse], error) {
	rel, err := h.releases.Get(ctx, req.Msg.GetConfigId(), req.Msg.GetGeneration())
	if err != nil {
		return nil, apierr.Connect(h.log, req.Spec().Procedure, err)
	}
	state, err := h.rollouts.ReleaseStates(ctx, rel.ConfigID)
	if err != nil {
		return nil, apierr.Connect(h.log, req.Spec().Procedure, err)
	}
	return connect.NewResponse(&pawlv1.GetReleaseResponse{Release: toProtoRelease(rel, state(rel))}), nil
}

// ListReleases implements pawl.v1.ReleaseService.ListReleases.
func (h *Releases) ListReleases(ctx context.Context, req *connect.Request[pawlv1.ListReleasesRequest]) (*connect.Response[pawlv1.ListReleasesResponse], error) {
	rels, err := h.releases.List(ctx, req.Msg.GetConfigId())
	if err != nil {
		return nil, apierr.Connect(h.log, req.Spec().Procedure, err)
	}
	resp := &pawlv1.ListReleasesResponse{}
	if len(rels) == 0 {
		return connect.NewResponse(resp), nil
	}
	state, err := h.rollouts.ReleaseStates(ctx, req.Msg.GetConfigId())
	if err != nil {
		return nil, apierr.Connect(h.log, req.Spec().Procedure, err)
	}
	for _, rel := range rels {
		resp.Releases = append(resp.Releases, toProtoRelease(rel, state(rel)))
	}
	return connect.NewResponse(resp), nil
}

// RetireMember implements pawl.v1.ReleaseService.RetireMember.
func (h *Releases) RetireMember(ctx context.Context, req *connect.Request[pawlv1.RetireMemberRequest]) (*connect.Response[pawlv1.RetireMemberResponse], error) {
	m := req.Msg
	rt, err := h.rollouts.Retire(ctx, m.GetConfigId(), m.GetGeneration(), m.GetWorkloadIdentity(), m.GetReason(), actor(req))
	if err != nil {
		return nil, apierr.Connect(h.log, req.Spec().Procedure, err)
	}
	h.log.Info("member retired", "config", rt.ConfigID, "generation", rt.Generation, "identity", rt.WorkloadIdentity, "reason", rt.Reason, "actor", rt.Actor)
	return connect.NewResponse(&pawlv1.RetireMemberResponse{Retirement: toProtoRetirement(rt)}), nil
}

func toProtoRetirement(rt rollout.Retirement) *pawlv1.Retirement {
	return &pawlv1.Retirement{ConfigId: rt.ConfigID, Generation: rt.Generation, WorkloadIdentity: rt.WorkloadIdentity,
		Reason: rt.Reason, Actor: rt.Actor, Time: timestamppb.New(rt.Time), Revision: rt.Revision}
}

// rejectedError lists the violations in the message, for people, and in a
// ReleaseRejected detail, for programs.
func rejectedError(r *release.RejectedError) error {
	detail := &pawlv1.ReleaseRejected{ValidatorDigest: r.Digest}
	var lines []string
	for _, v := range r.Violations {
		sev := pawlv1.Severity_SEVERITY_ERROR
		if v.Severity == "warning" {
			sev = pawlv1.Severity_SEVERITY_WARNING
		}
		detail.Violations = append(detail.Violations, &pawlv1.Violation{Path: v.Path, Message: v.Message, Severity: sev})
		lines = append(lines, fmt.Sprintf("%s: %s", v.Path, v.Message))
	}
	err := connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("validator %s rejected the content, so no release was created: %s",
		r.Digest, strings.Join(lines, "; ")))
	if d, derr := connect.NewErrorDetail(detail); derr == nil {
		err.AddDetail(d)
	}
	return err
}

var kinds = map[pawlv1.AckPolicyKind]quorum.Kind{
	pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL:            quorum.All,
	pawlv1.AckPolicyKind_ACK_POLICY_KIND_FRACTION:       quorum.Fraction,
	pawlv1.AckPolicyKind_ACK_POLICY_KIND_ZONE_QUORUM:    quorum.ZoneQuorum,
	pawlv1.AckPolicyKind_ACK_POLICY_KIND_CRITICAL_ROLE:  quorum.CriticalRole,
	pawlv1.AckPolicyKind_ACK_POLICY_KIND_TRAFFIC_WEIGHT: quorum.TrafficWeight,
}

func fromProtoSpec(s *pawlv1.ReleaseSpec) (release.Spec, error) {
	if s == nil {
		return release.Spec{}, apierr.InvalidArgument("spec is required")
	}
	spec := release.Spec{
		ConfigID: s.GetConfigId(), Content: s.GetContent(), MediaType: s.GetMediaType(),
		ValidatorDigest: s.GetValidatorDigest(), ValidatorParams: s.GetValidatorParams(),
		Selector: s.GetSelector(), Dependencies: s.GetDependencies(), SecretRefs: s.GetSecretRefs(),
		MinAppVersion: s.GetMinAppVersion(),
		HealthWindow:  s.GetHealthWindow().AsDuration(), Deadline: s.GetDeadline().AsDuration(),
	}
	for i, st := range s.GetStages() {
		kind, ok := kinds[st.GetPolicy().GetKind()]
		if !ok {
			return release.Spec{}, apierr.InvalidArgument("stage %d (%q): the ACK policy kind is missing or unknown", i, st.GetName())
		}
		stage := release.Stage{
			Name: st.GetName(), Selector: st.GetSelector(), Shadow: st.GetShadow(),
			Policy: quorum.Policy{Kind: kind, Fraction: st.GetPolicy().GetFraction(), Role: st.GetPolicy().GetRole(), MaxRejected: int(st.GetPolicy().GetMaxRejected())},
		}
		if b := st.GetBudget(); b != nil {
			stage.Budget = &release.Budget{MaxErrorRate: b.MaxErrorRate, MaxP99: b.GetMaxP99Latency().AsDuration()}
		}
		spec.Stages = append(spec.Stages, stage)
	}
	return spec, nil
}

// ToProtoState is a release state on the wire.
func ToProtoState(s release.State) pawlv1.ReleaseState {
	return pawlv1.ReleaseState(pawlv1.ReleaseState_value["RELEASE_STATE_"+string(s)])
}

func toProtoRelease(r release.Release, state release.State) *pawlv1.Release {
	spec := &pawlv1.ReleaseSpec{
		ConfigId: r.ConfigID, Content: r.Content, MediaType: r.MediaType,
		ValidatorDigest: r.ValidatorDigest, ValidatorParams: r.ValidatorParams,
		Selector: r.Selector, Dependencies: r.Dependencies, SecretRefs: r.SecretRefs, MinAppVersion: r.MinAppVersion,
		HealthWindow: durationpb.New(r.HealthWindow), Deadline: durationpb.New(r.Deadline),
	}
	for _, st := range r.Stages {
		var kind pawlv1.AckPolicyKind
		for k, v := range kinds {
			if v == st.Policy.Kind {
				kind = k
			}
		}
		ps := &pawlv1.Stage{Name: st.Name, Selector: st.Selector, Shadow: st.Shadow, Policy: &pawlv1.AckPolicy{
			Kind: kind, Fraction: st.Policy.Fraction, Role: st.Policy.Role, MaxRejected: int32(st.Policy.MaxRejected),
		}}
		if b := st.Budget; b != nil {
			ps.Budget = &pawlv1.HealthBudget{MaxErrorRate: b.MaxErrorRate}
			if b.MaxP99 > 0 {
				ps.Budget.MaxP99Latency = durationpb.New(b.MaxP99)
			}
		}
		spec.Stages = append(spec.Stages, ps)
	}
	out := &pawlv1.Release{
		Spec: spec, Generation: r.Generation, Predecessor: r.Predecessor, ContentDigest: r.ContentDigest,
		State: ToProtoState(state), CreatedAt: timestamppb.New(r.CreatedAt),
		CreatedBy: r.CreatedBy, Revision: r.Revision, MembershipEpoch: r.MembershipEpoch,
	}
	for _, m := range r.Membership {
		out.Membership = append(out.Membership, toProtoMember(m))
	}
	for _, m := range r.Ineligible {
		out.Ineligible = append(out.Ineligible, toProtoMember(m))
	}
	return out
}

func toProtoMember(m quorum.Member) *pawlv1.Member {
	return &pawlv1.Member{WorkloadIdentity: m.ID, Zone: m.Zone, Role: m.Role, TrafficWeight: m.Weight, Labels: m.Labels, AppVersion: m.AppVersion}
}

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
		return apierr.InvalidArgument("workload_identity is required")
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
				return apierr.Connect(h.log, req.Spec().Procedure, err)
			}
			if err := h.sendIfChanged(ctx, stream, identity, &last); err != nil {
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
			return apierr.Connect(h.log, req.Spec().Procedure, err)
		case len(batch.Events) == 0:
			continue
		}
		if err := h.sendIfChanged(ctx, stream, identity, &last); err != nil {
			return err
		}
	}
}

func (h *Instances) sendIfChanged(ctx context.Context, stream *connect.ServerStream[pawlv1.WatchAssignmentsResponse], identity string, last *string) error {
	as, rev, err := h.rollouts.Assignments(ctx, identity)
	if err != nil {
		return apierr.Connect(h.log, "WatchAssignments", err)
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
		return nil, apierr.Connect(h.log, req.Spec().Procedure, err)
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
		return nil, apierr.Connect(h.log, req.Spec().Procedure, err)
	}
	return connect.NewResponse(&pawlv1.HeartbeatResponse{Record: h.toProto(rec)}), nil
}

// ListInstances implements pawl.v1.InstanceService.ListInstances.
func (h *Instances) ListInstances(ctx context.Context, req *connect.Request[pawlv1.ListInstancesRequest]) (*connect.Response[pawlv1.ListInstancesResponse], error) {
	recs, err := h.registry.List(ctx)
	if err != nil {
		return nil, apierr.Connect(h.log, req.Spec().Procedure, err)
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
