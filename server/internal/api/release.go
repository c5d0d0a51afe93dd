package api

import (
	"context"
	"log/slog"
	"strconv"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/server/internal/pagetoken"
	"github.com/pawlcfg/pawl/server/internal/quorum"
	"github.com/pawlcfg/pawl/server/internal/release"
	"github.com/pawlcfg/pawl/server/internal/rollout"
)

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
	by := actor(ctx, req)
	rel, err := h.releases.Create(ctx, spec, by)
	if err != nil {
		return nil, Error(h.log, req.Spec(), err)
	}
	h.log.Info("release created", "config", rel.ConfigID, "generation", rel.Generation, "content_digest", rel.ContentDigest,
		"members", len(rel.Membership), "actor", by)
	return connect.NewResponse(&pawlv1.CreateReleaseResponse{Release: toProtoRelease(rel, release.StateCandidate, true)}), nil
}

// GetRelease implements pawl.v1.ReleaseService.GetRelease.
func (h *Releases) GetRelease(ctx context.Context, req *connect.Request[pawlv1.GetReleaseRequest]) (*connect.Response[pawlv1.GetReleaseResponse], error) {
	var rel release.Release
	var err error
	if gen := req.Msg.GetGeneration(); gen == 0 {
		rel, err = h.releases.Newest(ctx, req.Msg.GetConfigId())
	} else {
		rel, err = h.releases.Get(ctx, req.Msg.GetConfigId(), gen)
	}
	if err != nil {
		return nil, Error(h.log, req.Spec(), err)
	}
	state, err := h.rollouts.ReleaseStates(ctx, rel.ConfigID)
	if err != nil {
		return nil, Error(h.log, req.Spec(), err)
	}
	// An instance's download leaves the membership out: built and sent
	// for each of 10,000 instances, 10,000 members each, it was half of
	// pawld's CPU in a promotion.
	out := toProtoRelease(rel, state(rel), !req.Msg.GetOmitMembership())
	return connect.NewResponse(&pawlv1.GetReleaseResponse{Release: out}), nil
}

// ListReleases implements pawl.v1.ReleaseService.ListReleases.
func (h *Releases) ListReleases(ctx context.Context, req *connect.Request[pawlv1.ListReleasesRequest]) (*connect.Response[pawlv1.ListReleasesResponse], error) {
	m := req.Msg
	size, err := PageSize(m.GetPageSize())
	if err != nil {
		return nil, err
	}
	var revision, after int64
	if t := m.GetPageToken(); t != "" {
		tok, err := pagetoken.Decode(t)
		var gen int64
		if err == nil && tok.Scope == m.GetConfigId() {
			gen, err = strconv.ParseInt(tok.After, 10, 64)
		}
		if err != nil || tok.Scope != m.GetConfigId() {
			return nil, InvalidArgument("page_token is not a token of the releases of config %q; start again without it", m.GetConfigId())
		}
		revision, after = tok.Revision, gen
	}
	rels, rev, more, err := h.releases.ListPage(ctx, m.GetConfigId(), revision, after, size)
	if err != nil {
		return nil, Error(h.log, req.Spec(), err)
	}
	resp := &pawlv1.ListReleasesResponse{}
	if len(rels) == 0 {
		return connect.NewResponse(resp), nil
	}
	state, err := h.rollouts.ReleaseStates(ctx, m.GetConfigId())
	if err != nil {
		return nil, Error(h.log, req.Spec(), err)
	}
	for _, rel := range rels {
		pr := toProtoRelease(rel, state(rel), m.GetIncludeMembership())
		if !m.GetIncludeContent() {
			pr.Spec.Content = nil
		}
		resp.Releases = append(resp.Releases, pr)
	}
	if more {
		resp.NextPageToken = pagetoken.Token{Scope: m.GetConfigId(), Revision: rev, After: strconv.FormatInt(rels[len(rels)-1].Generation, 10)}.Encode()
	}
	return connect.NewResponse(resp), nil
}

// RetireMember implements pawl.v1.ReleaseService.RetireMember.
func (h *Releases) RetireMember(ctx context.Context, req *connect.Request[pawlv1.RetireMemberRequest]) (*connect.Response[pawlv1.RetireMemberResponse], error) {
	m := req.Msg
	rt, err := h.rollouts.Retire(ctx, m.GetConfigId(), m.GetGeneration(), m.GetWorkloadIdentity(), m.GetReason(), actor(ctx, req))
	if err != nil {
		return nil, Error(h.log, req.Spec(), err)
	}
	h.log.Info("member retired", "config", rt.ConfigID, "generation", rt.Generation, "identity", rt.WorkloadIdentity, "reason", rt.Reason, "actor", rt.Actor)
	return connect.NewResponse(&pawlv1.RetireMemberResponse{Retirement: toProtoRetirement(rt)}), nil
}

// RevokeRelease implements pawl.v1.ReleaseService.RevokeRelease.
func (h *Releases) RevokeRelease(ctx context.Context, req *connect.Request[pawlv1.RevokeReleaseRequest]) (*connect.Response[pawlv1.RevokeReleaseResponse], error) {
	m := req.Msg
	rv, err := h.rollouts.Revoke(ctx, m.GetConfigId(), m.GetGeneration(), m.GetReason(), actor(ctx, req))
	if err != nil {
		return nil, Error(h.log, req.Spec(), err)
	}
	h.log.Info("release revoked", "config", rv.ConfigID, "generation", rv.Generation, "reason", rv.Reason, "actor", rv.Actor)
	return connect.NewResponse(&pawlv1.RevokeReleaseResponse{Revocation: &pawlv1.Revocation{ConfigId: rv.ConfigID, Generation: rv.Generation,
		Reason: rv.Reason, Actor: rv.Actor, Time: timestamppb.New(rv.Time), Revision: rv.Revision}}), nil
}

func toProtoRetirement(rt rollout.Retirement) *pawlv1.Retirement {
	return &pawlv1.Retirement{ConfigId: rt.ConfigID, Generation: rt.Generation, WorkloadIdentity: rt.WorkloadIdentity,
		Reason: rt.Reason, Actor: rt.Actor, Time: timestamppb.New(rt.Time), Revision: rt.Revision, MembershipGeneration: rt.MembershipGeneration}
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
		return release.Spec{}, InvalidArgument("spec is required")
	}
	spec := release.Spec{
		ConfigID: s.GetConfigId(), Content: s.GetContent(), MediaType: s.GetMediaType(),
		ValidatorDigest: s.GetValidatorDigest(), ValidatorParams: s.GetValidatorParams(),
		Selector: s.GetSelector(), Dependencies: s.GetDependencies(), SecretRefs: s.GetSecretRefs(),
		MinAppVersion: s.GetMinAppVersion(), MinCoverage: s.MinCoverage, RequireInstanceCredential: s.GetRequireInstanceCredential(),
		HealthWindow: s.GetHealthWindow().AsDuration(), Deadline: s.GetDeadline().AsDuration(),
	}
	for i, st := range s.GetStages() {
		kind, ok := kinds[st.GetPolicy().GetKind()]
		if !ok {
			return release.Spec{}, InvalidArgument("stage %d (%q): the ACK policy kind is missing or unknown", i, st.GetName())
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

// toProtoRelease is r on the wire, with its frozen membership and
// ineligible instances when withMembership (member_count is set either
// way).
func toProtoRelease(r release.Release, state release.State, withMembership bool) *pawlv1.Release {
	spec := &pawlv1.ReleaseSpec{
		ConfigId: r.ConfigID, Content: r.Content, MediaType: r.MediaType,
		ValidatorDigest: r.ValidatorDigest, ValidatorParams: r.ValidatorParams,
		Selector: r.Selector, Dependencies: r.Dependencies, SecretRefs: r.SecretRefs, MinAppVersion: r.MinAppVersion,
		HealthWindow: durationpb.New(r.HealthWindow), Deadline: durationpb.New(r.Deadline), MinCoverage: r.MinCoverage,
		RequireInstanceCredential: r.RequireInstanceCredential,
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
		Spec: spec, Generation: r.Generation, MemberCount: int32(len(r.Membership)), Predecessor: r.Predecessor, ContentDigest: r.ContentDigest,
		State: ToProtoState(state), CreatedAt: timestamppb.New(r.CreatedAt),
		CreatedBy: r.CreatedBy, Revision: r.Revision, MembershipEpoch: r.MembershipEpoch,
	}
	if !withMembership {
		return out
	}
	for _, m := range r.Membership {
		out.Membership = append(out.Membership, toProtoMember(*m))
	}
	for _, m := range r.Ineligible {
		out.Ineligible = append(out.Ineligible, toProtoMember(m))
	}
	return out
}

func toProtoMember(m quorum.Member) *pawlv1.Member {
	return &pawlv1.Member{WorkloadIdentity: m.ID, Zone: m.Zone, Role: m.Role, TrafficWeight: m.Weight, Labels: m.Labels, AppVersion: m.AppVersion}
}
