package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/server/internal/audit"
	"github.com/pawlcfg/pawl/server/internal/auth"
	"github.com/pawlcfg/pawl/server/internal/pagetoken"
	"github.com/pawlcfg/pawl/server/internal/quorum"
	"github.com/pawlcfg/pawl/server/internal/release"
	"github.com/pawlcfg/pawl/server/internal/rollout"
	"github.com/pawlcfg/pawl/validators/host"
)

// Rollouts is the RolloutService handler.
type Rollouts struct {
	rollouts *rollout.Rollouts
	releases *release.Releases
	log      *slog.Logger
}

var _ pawlv1connect.RolloutServiceHandler = (*Rollouts)(nil)

// NewRollouts returns the RolloutService handler.
func NewRollouts(r *rollout.Rollouts, releases *release.Releases, log *slog.Logger) *Rollouts {
	return &Rollouts{rollouts: r, releases: releases, log: log}
}

// Ack implements pawl.v1.RolloutService.Ack.
func (h *Rollouts) Ack(ctx context.Context, req *connect.Request[pawlv1.AckRequest]) (*connect.Response[pawlv1.AckResponse], error) {
	ack, err := fromProtoAck(req.Msg.GetAck())
	if err != nil {
		return nil, err
	}
	stored, err := h.rollouts.RecordAck(ctx, ack)
	if err != nil {
		return nil, Error(h.log, req.Spec(), err)
	}
	return connect.NewResponse(&pawlv1.AckResponse{Ack: toProtoAck(stored)}), nil
}

// fromProtoAck reads an ACK from the wire; what it cannot read is an
// InvalidArgument Connect error naming the field.
func fromProtoAck(a *pawlv1.Ack) (rollout.Ack, error) {
	ack := rollout.Ack{
		ConfigID: a.GetConfigId(), Generation: a.GetGeneration(), WorkloadIdentity: a.GetWorkloadIdentity(), BootID: a.GetBootId(),
		MembershipEpoch: a.GetMembershipEpoch(), ContentDigest: a.GetContentDigest(), ValidatorDigest: a.GetValidatorDigest(),
		AppArtifact: a.GetAppArtifact(), AppVersion: a.GetAppVersion(), ApplySequence: a.GetApplySequence(),
		State:    rollout.AckState(strings.TrimPrefix(a.GetState().String(), "INSTANCE_STATE_")),
		HealthOK: a.GetHealthOk(), Reason: a.GetReason(), TraceParent: a.GetTraceparent(), ReportID: a.GetReportId(),
	}
	if code := a.GetRejectCode(); code != pawlv1.RejectCode_REJECT_CODE_UNSPECIFIED {
		if _, ok := pawlv1.RejectCode_name[int32(code)]; !ok {
			return rollout.Ack{}, InvalidArgument("reject_code %d is not a RejectCode", code)
		}
		ack.RejectCode = strings.TrimPrefix(code.String(), "REJECT_CODE_")
	}
	ack.Violations = fromProtoViolations(a.GetViolations())
	if held := a.GetHeld(); held != nil {
		if err := held.CheckValid(); err != nil {
			return rollout.Ack{}, InvalidArgument("held: %v", err)
		}
		ack.Held = held.AsDuration()
	}
	if m := a.GetHealth(); m != nil {
		ack.Health = &rollout.Health{ErrorRate: m.GetErrorRate(), P99: m.GetP99Latency().AsDuration()}
	}
	return ack, nil
}

// GetRolloutStatus implements pawl.v1.RolloutService.GetRolloutStatus.
func (h *Rollouts) GetRolloutStatus(ctx context.Context, req *connect.Request[pawlv1.GetRolloutStatusRequest]) (*connect.Response[pawlv1.GetRolloutStatusResponse], error) {
	config, gen := req.Msg.GetConfigId(), req.Msg.GetGeneration()
	size, err := PageSize(req.Msg.GetAckPageSize())
	if err != nil {
		return nil, err
	}
	scope := config + "@" + strconv.FormatInt(gen, 10)
	ackRevision, after, err := PageStart(req.Msg.GetAckPageToken(), scope, "ack_page_token", fmt.Sprintf("the ACKs of %s generation %d", config, gen))
	if err != nil {
		return nil, err
	}
	// Every page is read at the revision of the first: the stages, the
	// state and the ACKs alike.
	st, err := h.rollouts.StatusAt(ctx, config, gen, ackRevision)
	if err != nil {
		return nil, Error(h.log, req.Spec(), err)
	}
	resp := &pawlv1.GetRolloutStatusResponse{Pointer: toProtoPointer(st.Pointer), State: ToProtoState(st.State),
		Coverage: toProtoCoverage(st.Coverage)}
	for _, s := range st.Stages {
		ps := toProtoStage(s.Name, s.Evaluation)
		ps.States = counts(s.States)
		ps.Shadow, ps.Reached, ps.Retired = s.Shadow, s.Reached, int32(s.Retired)
		if !s.PassedAt.IsZero() {
			ps.PassedAt = timestamppb.New(s.PassedAt)
		}
		for zone, zs := range ps.Zones {
			zs.States = counts(s.ZoneStates[zone])
		}
		ps.Roles = roleStatuses(s.RoleStates)
		resp.Stages = append(resp.Stages, ps)
	}
	for _, rt := range st.Retirements {
		resp.Retirements = append(resp.Retirements, toProtoRetirement(rt))
	}
	resp.MembershipGeneration = st.MembershipGeneration
	if st.Stop != nil {
		resp.Stop = toProtoStop(*st.Stop)
	}
	if ackRevision == 0 {
		ackRevision = st.Revision
	}
	acks, rev, more, err := h.rollouts.AckPage(ctx, config, gen, ackRevision, after, size)
	if err != nil {
		return nil, Error(h.log, req.Spec(), err)
	}
	for _, a := range acks {
		resp.Acks = append(resp.Acks, toProtoAck(a))
	}
	if more {
		resp.NextAckPageToken = pagetoken.Token{Scope: scope, Revision: rev, After: rollout.AckKey(acks[len(acks)-1])}.Encode()
	}
	return connect.NewResponse(resp), nil
}

// StopRollout implements pawl.v1.RolloutService.StopRollout.
func (h *Rollouts) StopRollout(ctx context.Context, req *connect.Request[pawlv1.StopRolloutRequest]) (*connect.Response[pawlv1.StopRolloutResponse], error) {
	m := req.Msg
	stop, err := h.rollouts.StopRollout(ctx, m.GetConfigId(), m.GetGeneration(), m.GetReason(), actor(ctx, req))
	if err != nil {
		return nil, Error(h.log, req.Spec(), err)
	}
	h.log.Info("rollout stopped", "config", stop.ConfigID, "generation", stop.Generation, "reason", stop.Reason, "actor", stop.Actor)
	return connect.NewResponse(&pawlv1.StopRolloutResponse{Stop: toProtoStop(stop)}), nil
}

// Promote implements pawl.v1.RolloutService.Promote.
func (h *Rollouts) Promote(ctx context.Context, req *connect.Request[pawlv1.PromoteRequest]) (*connect.Response[pawlv1.PromoteResponse], error) {
	m := req.Msg
	call, _ := audit.CallFrom(ctx)
	rc, err := h.rollouts.Promote(ctx, rollout.Move{
		ConfigID: m.GetConfigId(), To: m.GetGeneration(), ExpectedGeneration: m.GetExpectedGeneration(),
		ExpectedEpoch: m.GetExpectedEpoch(), IdempotencyKey: m.GetIdempotencyKey(), Actor: actor(ctx, req),
		RequestID: call.RequestID, Principal: principalOf(ctx, call),
	})
	if err != nil {
		return nil, Error(h.log, req.Spec(), err)
	}
	h.log.Info("promoted", "config", rc.ConfigID, "from", rc.From, "to", rc.To, "epoch", rc.Epoch, "actor", rc.Actor, "key", rc.IdempotencyKey)
	return connect.NewResponse(&pawlv1.PromoteResponse{Receipt: toProtoReceipt(rc)}), nil
}

// Rollback implements pawl.v1.RolloutService.Rollback.
func (h *Rollouts) Rollback(ctx context.Context, req *connect.Request[pawlv1.RollbackRequest]) (*connect.Response[pawlv1.RollbackResponse], error) {
	m := req.Msg
	call, _ := audit.CallFrom(ctx)
	rc, err := h.rollouts.Rollback(ctx, rollout.Move{
		ConfigID: m.GetConfigId(), ExpectedGeneration: m.GetExpectedGeneration(), ExpectedEpoch: m.GetExpectedEpoch(),
		IdempotencyKey: m.GetIdempotencyKey(), Actor: actor(ctx, req),
		RequestID: call.RequestID, Principal: principalOf(ctx, call),
	})
	if err != nil {
		return nil, Error(h.log, req.Spec(), err)
	}
	h.log.Info("rolled back", "config", rc.ConfigID, "from", rc.From, "to", rc.To, "epoch", rc.Epoch, "actor", rc.Actor, "key", rc.IdempotencyKey)
	return connect.NewResponse(&pawlv1.RollbackResponse{Receipt: toProtoReceipt(rc)}), nil
}

// GetPromotion implements pawl.v1.RolloutService.GetPromotion.
func (h *Rollouts) GetPromotion(ctx context.Context, req *connect.Request[pawlv1.GetPromotionRequest]) (*connect.Response[pawlv1.GetPromotionResponse], error) {
	rc, err := h.rollouts.GetPromotion(ctx, req.Msg.GetConfigId(), req.Msg.GetIdempotencyKey())
	if err != nil {
		return nil, Error(h.log, req.Spec(), err)
	}
	return connect.NewResponse(&pawlv1.GetPromotionResponse{Receipt: toProtoReceipt(rc)}), nil
}

// ListApplied implements pawl.v1.RolloutService.ListApplied.
func (h *Rollouts) ListApplied(ctx context.Context, req *connect.Request[pawlv1.ListAppliedRequest]) (*connect.Response[pawlv1.ListAppliedResponse], error) {
	config := req.Msg.GetConfigId()
	size, err := PageSize(req.Msg.GetPageSize())
	if err != nil {
		return nil, err
	}
	revision, after, err := PageStart(req.Msg.GetPageToken(), config, "page_token", fmt.Sprintf("the applied listing of config %q", config))
	if err != nil {
		return nil, err
	}
	page, err := h.rollouts.ListApplied(ctx, config, revision, after, size)
	if err != nil {
		return nil, Error(h.log, req.Spec(), err)
	}
	resp := &pawlv1.ListAppliedResponse{Revision: page.Revision}
	digests := map[int64]string{} // generation -> the release's content digest
	for _, rec := range page.Records {
		digest, ok := digests[rec.Generation]
		if !ok {
			if rel, err := h.releases.Get(ctx, config, rec.Generation); err == nil {
				digest = rel.ContentDigest
			} else if !errors.Is(err, release.ErrNotFound) && !errors.Is(err, release.ErrInvalid) {
				return nil, Error(h.log, req.Spec(), err)
			}
			digests[rec.Generation] = digest
		}
		resp.Applied = append(resp.Applied, &pawlv1.AppliedConfig{
			ConfigId: rec.ConfigID, WorkloadIdentity: rec.WorkloadIdentity, Generation: rec.Generation,
			ContentDigest: rec.ContentDigest, ValidatorDigest: rec.ValidatorDigest, BootId: rec.BootID,
			MembershipEpoch: rec.MembershipEpoch, ApplySequence: rec.ApplySequence,
			State:      pawlv1.InstanceState(pawlv1.InstanceState_value["INSTANCE_STATE_"+string(rec.State)]),
			ReportedAt: timestamppb.New(rec.ReportedAt), Traceparent: rec.TraceParent, TraceId: rec.TraceID,
			CurrentBoot: rec.CurrentBoot, MatchesRelease: digest != "" && digest == rec.ContentDigest,
		})
	}
	if page.More && len(page.Records) > 0 {
		resp.NextPageToken = pagetoken.Token{Scope: config, Revision: page.Revision, After: page.Records[len(page.Records)-1].WorkloadIdentity}.Encode()
	}
	return connect.NewResponse(resp), nil
}

// GetPointer implements pawl.v1.RolloutService.GetPointer.
func (h *Rollouts) GetPointer(ctx context.Context, req *connect.Request[pawlv1.GetPointerRequest]) (*connect.Response[pawlv1.GetPointerResponse], error) {
	ptr, err := h.rollouts.Pointer(ctx, req.Msg.GetConfigId())
	if err != nil {
		return nil, Error(h.log, req.Spec(), err)
	}
	return connect.NewResponse(&pawlv1.GetPointerResponse{Pointer: toProtoPointer(ptr)}), nil
}

func toProtoAck(a rollout.Ack) *pawlv1.Ack {
	out := &pawlv1.Ack{
		ConfigId: a.ConfigID, Generation: a.Generation, WorkloadIdentity: a.WorkloadIdentity, BootId: a.BootID,
		MembershipEpoch: a.MembershipEpoch, ContentDigest: a.ContentDigest, ValidatorDigest: a.ValidatorDigest,
		AppArtifact: a.AppArtifact, AppVersion: a.AppVersion, ApplySequence: a.ApplySequence,
		State:    pawlv1.InstanceState(pawlv1.InstanceState_value["INSTANCE_STATE_"+string(a.State)]),
		HealthOk: a.HealthOK, Reason: a.Reason, Traceparent: a.TraceParent, TraceId: a.TraceID, ReceivedAt: timestamppb.New(a.ReceivedAt),
		Counted: a.Counted, NotCountedReason: a.Why, BudgetBreach: a.Breach, ReportId: a.ReportID,
	}
	if a.Health != nil {
		out.Health = &pawlv1.HealthMeasurement{ErrorRate: a.Health.ErrorRate, P99Latency: durationpb.New(a.Health.P99)}
	}
	if a.Held > 0 {
		out.Held = durationpb.New(a.Held)
	}
	if a.RejectCode != "" {
		out.RejectCode = pawlv1.RejectCode(pawlv1.RejectCode_value["REJECT_CODE_"+a.RejectCode])
	}
	if len(a.Violations) > 0 {
		out.Violations = toProtoViolations(a.Violations)
	}
	return out
}

// fromProtoViolations reads an ACK's violations (nil for none).
func fromProtoViolations(vs []*pawlv1.Violation) []host.Violation {
	if len(vs) == 0 {
		return nil
	}
	out := make([]host.Violation, 0, len(vs))
	for _, v := range vs {
		hv := host.Violation{Path: v.GetPath(), Message: v.GetMessage(), Severity: "error"}
		if v.GetSeverity() == pawlv1.Severity_SEVERITY_WARNING {
			hv.Severity = "warning"
		}
		out = append(out, hv)
	}
	return out
}

// roleStatuses counts a stage's members per role, from their display
// states per role.
func roleStatuses(byRole map[string]map[string]int) map[string]*pawlv1.RoleStatus {
	out := make(map[string]*pawlv1.RoleStatus, len(byRole))
	for role, states := range byRole {
		rs := &pawlv1.RoleStatus{States: counts(states)}
		for _, n := range states {
			rs.Members += int32(n)
		}
		out[role] = rs
	}
	return out
}

func toProtoStage(name string, ev quorum.Evaluation) *pawlv1.StageStatus {
	st := &pawlv1.StageStatus{
		Name: name, Outcome: ev.Outcome.String(), Reason: ev.Reason,
		Members: int32(ev.Members), Healthy: int32(ev.Healthy), Rejected: int32(ev.Rejected),
		Zones: map[string]*pawlv1.ZoneStatus{},
	}
	for zone, z := range ev.Zones {
		st.Zones[zone] = &pawlv1.ZoneStatus{Members: int32(z.Members), Healthy: int32(z.Healthy), Rejected: int32(z.Rejected)}
	}
	return st
}

func toProtoPointer(p rollout.Pointer) *pawlv1.Pointer {
	return &pawlv1.Pointer{Generation: p.Generation, Epoch: p.Epoch, ReceiptKey: p.ReceiptKey}
}

func toProtoReceipt(rc rollout.Receipt) *pawlv1.Receipt {
	out := &pawlv1.Receipt{
		ConfigId: rc.ConfigID, FromGeneration: rc.From, ToGeneration: rc.To, Epoch: rc.Epoch, Rollback: rc.Rollback,
		Actor: rc.Actor, Time: timestamppb.New(rc.Time), IdempotencyKey: rc.IdempotencyKey, Revision: rc.Revision,
		RequestId: rc.RequestID, Principal: rc.Principal,
	}
	for i, ev := range rc.Evidence {
		out.Evidence = append(out.Evidence, toProtoStage(nameAt(rc.StageNames, i), ev))
	}
	out.MembershipGeneration = rc.MembershipGeneration
	for _, rt := range rc.Retirements {
		out.Retirements = append(out.Retirements, toProtoRetirement(rt))
	}
	return out
}

func toProtoStop(s rollout.Stop) *pawlv1.Stop {
	out := &pawlv1.Stop{
		ConfigId: s.ConfigID, Generation: s.Generation, Stage: s.Stage, Reason: s.Reason, Manual: s.Manual,
		Actor: s.Actor, Time: timestamppb.New(s.Time), Revision: s.Revision,
	}
	for i, ev := range s.Evidence {
		out.Evidence = append(out.Evidence, toProtoStage(nameAt(s.StageNames, i), ev))
	}
	return out
}

// nameAt names the i-th stage of a record's evidence.
func nameAt(names []string, i int) string {
	if i < len(names) {
		return names[i]
	}
	return ""
}

func counts(m map[string]int) map[string]int32 {
	out := make(map[string]int32, len(m))
	for k, v := range m {
		out[k] = int32(v)
	}
	return out
}

// maxMissing bounds the members a status names as missing from coverage:
// enough to act on, without a page of ten thousand names.
const maxMissing = 100

func toProtoCoverage(c rollout.Coverage) *pawlv1.Coverage {
	missing := c.Missing
	if len(missing) > maxMissing {
		missing = missing[:maxMissing]
	}
	return &pawlv1.Coverage{Generation: c.Generation, Members: int32(c.Members), Reported: int32(c.Reported),
		OnRelease: int32(c.OnRelease), Mismatched: int32(c.Mismatched), Summary: c.String(),
		Required: int32(c.Required), Missing: missing, MissingCount: int32(len(c.Missing))}
}

// principalOf is the principal a receipt names: the authenticated one, or
// without authentication the one the audit record names.
func principalOf(ctx context.Context, call audit.Call) string {
	if p, ok := auth.PrincipalFrom(ctx); ok && p.Method != auth.MethodOpen {
		return p.Name
	}
	return call.Principal
}
