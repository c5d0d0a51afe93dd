package server_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/testclock"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/server"
)

// render is an assignment set as "config@generation[:stage]" entries.
func render(resp *pawlv1.WatchAssignmentsResponse) string {
	out := ""
	for _, a := range resp.GetAssignments() {
		out += fmt.Sprintf("%s@%d", a.GetConfigId(), a.GetGeneration())
		if a.GetStage() != "" {
			out += ":" + a.GetStage()
		}
		out += " "
	}
	return out
}

type assignmentStream struct {
	*connect.ServerStreamForClient[pawlv1.WatchAssignmentsResponse]
}

// next waits for the next set that differs from the last and returns it.
func (s assignmentStream) next(t *testing.T) string {
	t.Helper()
	if !s.Receive() {
		t.Fatalf("assignment stream ended: %v", s.Err())
	}
	return render(s.Msg())
}

// canaryRollout drives releases of config "routing" over real clients of
// one server: a canary stage (instances labelled canary=true), then
// everyone, each needing every member healthy.
type canaryRollout struct {
	t      *testing.T
	ctx    context.Context
	is     pawlv1connect.InstanceServiceClient
	rs     pawlv1connect.ReleaseServiceClient
	ro     pawlv1connect.RolloutServiceClient
	digest string
}

// newCanaryRollout uploads the routing validator; rolloutOpts choose the
// RolloutService client's protocol (gRPC for the others).
func newCanaryRollout(t *testing.T, ctx context.Context, srv *testserver.Server, rolloutOpts ...connect.ClientOption) *canaryRollout {
	client := testserver.HTTPClient(t)
	return &canaryRollout{
		t: t, ctx: ctx,
		is:     pawlv1connect.NewInstanceServiceClient(client, srv.URL, connect.WithGRPC()),
		rs:     pawlv1connect.NewReleaseServiceClient(client, srv.URL, connect.WithGRPC()),
		ro:     pawlv1connect.NewRolloutServiceClient(client, srv.URL, rolloutOpts...),
		digest: upload(t, newValidators(t, srv), "routing"),
	}
}

func (c *canaryRollout) create(weight int) *pawlv1.Release {
	c.t.Helper()
	resp, err := c.rs.CreateRelease(c.ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: &pawlv1.ReleaseSpec{
		ConfigId: "routing", MediaType: "application/json", ValidatorDigest: c.digest,
		Content: []byte(fmt.Sprintf(`{"upstreams":[{"host":"a","weight":%d},{"host":"b","weight":%d}]}`, weight, 100-weight)),
		Stages: []*pawlv1.Stage{
			{Name: "canary", Selector: map[string]string{"canary": "true"}, Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}},
			{Name: "everyone", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}},
		},
		Deadline: durationpb.New(time.Hour),
	}}))
	if err != nil {
		c.t.Fatal(err)
	}
	return resp.Msg.GetRelease()
}

// ack reports id (boot "b") healthy on rel and returns the ACK as judged.
func (c *canaryRollout) ack(rel *pawlv1.Release, id string) *pawlv1.Ack {
	c.t.Helper()
	resp, err := c.ro.Ack(c.ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: &pawlv1.Ack{
		ConfigId: "routing", Generation: rel.GetGeneration(), WorkloadIdentity: id, BootId: "b", ApplySequence: rel.GetGeneration(),
		MembershipEpoch: epochOf(c.t, c.is, id),
		ContentDigest:   rel.GetContentDigest(), ValidatorDigest: c.digest, State: pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED, HealthOk: true,
	}}))
	if err != nil {
		c.t.Fatal(err)
	}
	return resp.Msg.GetAck()
}

func (c *canaryRollout) watch(id string) assignmentStream {
	c.t.Helper()
	s, err := c.is.WatchAssignments(c.ctx, connect.NewRequest(&pawlv1.WatchAssignmentsRequest{WorkloadIdentity: id}))
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = s.Close() })
	return assignmentStream{s}
}

// TestInstancesFollowTheirAssignments: a canary instance gets the new
// generation at the canary stage, the rest only once the canary stage
// passed, and everyone the active generation after promotion and rollback.
func TestInstancesFollowTheirAssignments(t *testing.T) {
	srv := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newCanaryRollout(t, ctx, srv, connect.WithGRPC())
	is, ro := c.is, c.ro
	register(t, is, "canary-1", "b", "zone-a", map[string]string{"canary": "true"})
	register(t, is, "main-1", "b", "zone-a", nil)
	register(t, is, "main-2", "b", "zone-b", nil)
	create, ack, watch := c.create, c.ack, c.watch

	canary, main := watch("canary-1"), watch("main-1")
	if got := canary.next(t); got != "" {
		t.Fatalf("canary before any release: %q", got)
	}
	if got := main.next(t); got != "" {
		t.Fatalf("main before any release: %q", got)
	}

	rel1 := create(50)
	if got := canary.next(t); got != "routing@1:canary " {
		t.Fatalf("canary after the release: %q", got)
	}
	ack(rel1, "canary-1") // the canary stage passes: everyone is reached
	if got := main.next(t); got != "routing@1:everyone " {
		t.Fatalf("main after the canary stage: %q", got)
	}
	ack(rel1, "main-1")
	ack(rel1, "main-2")
	if _, err := ro.Promote(ctx, connect.NewRequest(&pawlv1.PromoteRequest{ConfigId: "routing", Generation: 1, IdempotencyKey: "p1"})); err != nil {
		t.Fatal(err)
	}
	if got := main.next(t); got != "routing@1 " {
		t.Fatalf("main after promotion: %q", got)
	}
	if got := canary.next(t); got != "routing@1 " {
		t.Fatalf("canary after promotion: %q", got)
	}

	rel2 := create(70)
	if got := canary.next(t); got != "routing@2:canary " {
		t.Fatalf("canary with generation 2 out: %q", got)
	}
	ack(rel2, "canary-1")
	if got := main.next(t); got != "routing@2:everyone " {
		t.Fatalf("main with generation 2 past its canary: %q", got)
	}
	ack(rel2, "main-1")
	ack(rel2, "main-2")
	if _, err := ro.Promote(ctx, connect.NewRequest(&pawlv1.PromoteRequest{ConfigId: "routing", Generation: 2, ExpectedGeneration: 1, IdempotencyKey: "p2"})); err != nil {
		t.Fatal(err)
	}
	if got := main.next(t); got != "routing@2 " {
		t.Fatalf("main after promoting 2: %q", got)
	}
	if _, err := ro.Rollback(ctx, connect.NewRequest(&pawlv1.RollbackRequest{ConfigId: "routing", ExpectedGeneration: 2, IdempotencyKey: "rb"})); err != nil {
		t.Fatal(err)
	}
	// After the rollback everyone is assigned generation 1, not the
	// largest generation they have seen.
	if got := main.next(t); got != "routing@1 " {
		t.Fatalf("main after the rollback: %q", got)
	}
	for {
		got := canary.next(t)
		if got == "routing@1 " {
			break
		}
		if got != "routing@2 " {
			t.Fatalf("canary saw %q on its way back to generation 1", got)
		}
	}
}

// TestAFractionStageSendsItsCohortThenZoneByZone: a plan of a 20% canary,
// then zone-a, then everyone. Only the canary cohort gets the release at
// first; zone-a's other instances get it when the canary passes; the rest
// when zone-a passes. Each instance's first assignment says which stage
// reached it.
func TestAFractionStageSendsItsCohortThenZoneByZone(t *testing.T) {
	srv := testserver.Start(t)
	client := testserver.HTTPClient(t)
	is := pawlv1connect.NewInstanceServiceClient(client, srv.URL, connect.WithGRPC())
	rs := pawlv1connect.NewReleaseServiceClient(client, srv.URL, connect.WithGRPC())
	ro := pawlv1connect.NewRolloutServiceClient(client, srv.URL, connect.WithGRPC())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	zoneOf := map[string]string{}
	for i := range 6 {
		id := fmt.Sprintf("pay-%d", i)
		zoneOf[id] = fmt.Sprintf("zone-%c", 'a'+i%3)
		register(t, is, id, "b", zoneOf[id], nil)
	}
	digest := upload(t, newValidators(t, srv), "routing")

	type first struct{ id, got string }
	firsts := make(chan first, 6)
	var wg sync.WaitGroup
	for id := range zoneOf {
		s, err := is.WatchAssignments(ctx, connect.NewRequest(&pawlv1.WatchAssignmentsRequest{WorkloadIdentity: id}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		if !s.Receive() || len(s.Msg().GetAssignments()) != 0 {
			t.Fatalf("%s before the release: %v", id, s.Err())
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if s.Receive() {
				firsts <- first{id, render(s.Msg())}
			}
		}()
	}
	defer func() {
		cancel() // ends the streams, so the readers return
		wg.Wait()
	}()

	resp, err := rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: &pawlv1.ReleaseSpec{
		ConfigId: "routing", MediaType: "application/json", ValidatorDigest: digest,
		Content: []byte(`{"upstreams":[{"host":"a","weight":100}]}`),
		Stages: []*pawlv1.Stage{
			{Name: "canary", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_FRACTION, Fraction: 0.2}},
			{Name: "zone-a", Selector: map[string]string{"zone": "zone-a"}, Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}},
			{Name: "everyone", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}},
		},
		Deadline: durationpb.New(time.Hour),
	}}))
	if err != nil {
		t.Fatal(err)
	}
	rel := resp.Msg.GetRelease()
	ack := func(id string) {
		t.Helper()
		if _, err := ro.Ack(ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: &pawlv1.Ack{
			ConfigId: "routing", Generation: 1, WorkloadIdentity: id, BootId: "b", ApplySequence: 1, MembershipEpoch: epochOf(t, is, id),
			ContentDigest: rel.GetContentDigest(), ValidatorDigest: digest, State: pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED, HealthOk: true,
		}})); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]string{}
	receive := func(n int) []string {
		t.Helper()
		var ids []string
		for range n {
			select {
			case f := <-firsts:
				got[f.id] = f.got
				ids = append(ids, f.id)
			case <-ctx.Done():
				t.Fatalf("waiting for assignments: %v (so far %v)", ctx.Err(), got)
			}
		}
		return ids
	}
	// ceil(20% of 6) = 2 canaries; they pass the canary stage.
	canaries := receive(2)
	for _, id := range canaries {
		if got[id] != "routing@1:canary " {
			t.Fatalf("first assignments %v; want 2 canaries first", got)
		}
		ack(id)
	}
	// zone-a's members outside the cohort are reached next.
	waitingInA := 0
	for id, z := range zoneOf {
		if z == "zone-a" && got[id] == "" {
			waitingInA++
		}
	}
	for _, id := range receive(waitingInA) {
		if got[id] != "routing@1:zone-a " {
			t.Fatalf("after the canary stage %s got %q; want zone-a", id, got[id])
		}
	}
	for id, z := range zoneOf {
		if z == "zone-a" && got[id] != "routing@1:canary " {
			ack(id)
		}
	}
	// Then everyone else, and nobody got anything out of turn.
	for _, id := range receive(6 - len(got)) {
		if got[id] != "routing@1:everyone " || zoneOf[id] == "zone-a" {
			t.Fatalf("after zone-a %s (%s) got %q", id, zoneOf[id], got[id])
		}
	}
}

// TestAssignmentDeltasAndResume: with deltas, the first message is the
// full set and each later one carries only the configs that changed, and
// the configs that have no assignment any more; a stream that reconnects
// with the last revision it holds gets a set at that revision or later, and
// a revision the server never had is refused.
func TestAssignmentDeltasAndResume(t *testing.T) {
	srv := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newCanaryRollout(t, ctx, srv, connect.WithGRPC())
	register(t, c.is, "canary-1", "b", "zone-a", map[string]string{"canary": "true"})
	register(t, c.is, "main-1", "b", "zone-b", nil)
	rel1 := c.create(50)
	c.ack(rel1, "canary-1")
	c.ack(rel1, "main-1")
	if _, err := c.ro.Promote(ctx, connect.NewRequest(&pawlv1.PromoteRequest{ConfigId: "routing", Generation: 1, IdempotencyKey: "p1"})); err != nil {
		t.Fatal(err)
	}
	// A second config, whose first release goes to the canary only.
	spec := &pawlv1.ReleaseSpec{ConfigId: "limits", MediaType: "application/json", ValidatorDigest: c.digest,
		Content: []byte(`{"upstreams":[{"host":"a","weight":100}]}`), Deadline: durationpb.New(time.Hour),
		Stages: []*pawlv1.Stage{{Name: "canary", Selector: map[string]string{"canary": "true"}, Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}}}}
	if _, err := c.rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: spec})); err != nil {
		t.Fatal(err)
	}
	s, err := c.is.WatchAssignments(ctx, connect.NewRequest(&pawlv1.WatchAssignmentsRequest{WorkloadIdentity: "canary-1", Deltas: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	receive := func() *pawlv1.WatchAssignmentsResponse {
		t.Helper()
		if !s.Receive() {
			t.Fatalf("stream ended: %v", s.Err())
		}
		return s.Msg()
	}
	first := receive()
	if !first.GetFull() || render(first) != "limits@1:canary routing@1 " {
		t.Fatalf("first message = %v (full %v)", render(first), first.GetFull())
	}
	// Generation 2 of routing reaches the canary: one config travels.
	rel2 := c.create(70)
	if d := receive(); d.GetFull() || render(d) != "routing@2:canary " || len(d.GetRemovedConfigIds()) != 0 {
		t.Fatalf("delta after routing@2 = %q (full %v, removed %v)", render(d), d.GetFull(), d.GetRemovedConfigIds())
	}
	// The canary ACKs it: routing is computed again, and its assignments
	// have not changed, so nothing travels (the next message is the stop's).
	c.ack(rel2, "canary-1")
	// The limits rollout stops: its only assignment is gone.
	if _, err := c.ro.StopRollout(ctx, connect.NewRequest(&pawlv1.StopRolloutRequest{ConfigId: "limits", Generation: 1, Reason: "bad"})); err != nil {
		t.Fatal(err)
	}
	d := receive()
	if d.GetFull() || len(d.GetAssignments()) != 0 || fmt.Sprint(d.GetRemovedConfigIds()) != "[limits]" {
		t.Fatalf("delta after the stop = %q (full %v, removed %v)", render(d), d.GetFull(), d.GetRemovedConfigIds())
	}
	last := d.GetRevision()
	_ = s.Close()

	// Reconnecting with the last revision held: a full set, never older.
	again, err := c.is.WatchAssignments(ctx, connect.NewRequest(&pawlv1.WatchAssignmentsRequest{WorkloadIdentity: "canary-1", Deltas: true, AfterRevision: last}))
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if !again.Receive() || !again.Msg().GetFull() || again.Msg().GetRevision() < last || render(again.Msg()) != "routing@2:canary " {
		t.Fatalf("resumed = %v, %v", again.Msg(), again.Err())
	}
	future, err := c.is.WatchAssignments(ctx, connect.NewRequest(&pawlv1.WatchAssignmentsRequest{WorkloadIdentity: "canary-1", AfterRevision: last + 1000}))
	if err != nil {
		t.Fatal(err)
	}
	defer future.Close()
	if future.Receive() || connect.CodeOf(future.Err()) != connect.CodeInvalidArgument || !strings.Contains(future.Err().Error(), "after_revision") {
		t.Fatalf("a revision from the future = %v", future.Err())
	}
}

// TestAnAssignmentStreamHoldsTheLease: an instance that keeps its
// assignment stream open with its boot stays live with no heartbeat, long
// past its lease; when the stream ends it has a full lease to come back;
// another boot cannot hold it.
func TestAnAssignmentStreamHoldsTheLease(t *testing.T) {
	clock := testclock.New(time.Now())
	srv := testserver.Start(t, server.WithClock(clock.Now), server.WithInstanceLease(30*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := testserver.HTTPClient(t)
	is := pawlv1connect.NewInstanceServiceClient(client, srv.URL, connect.WithGRPC())
	register(t, is, "pay-1", "boot-1", "zone-a", nil)
	live := soleLive(t, ctx, is)
	stale, err := is.WatchAssignments(ctx, connect.NewRequest(&pawlv1.WatchAssignmentsRequest{WorkloadIdentity: "pay-1", BootId: "boot-0"}))
	if err != nil {
		t.Fatal(err)
	}
	if stale.Receive() || connect.CodeOf(stale.Err()) != connect.CodeFailedPrecondition {
		t.Fatalf("a stream of another boot = %v", stale.Err())
	}
	_ = stale.Close()
	streamCtx, closeStream := context.WithCancel(ctx)
	s, err := is.WatchAssignments(streamCtx, connect.NewRequest(&pawlv1.WatchAssignmentsRequest{WorkloadIdentity: "pay-1", BootId: "boot-1"}))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Receive() {
		t.Fatal(s.Err())
	}
	clock.Advance(10 * time.Minute)
	if !live() {
		t.Fatal("the instance holding its stream lost its lease")
	}
	closeStream()
	_ = s.Close()
	leaseRunsOneTerm(t, srv, clock, live)
}

// soleLive reports whether the one registered instance is live.
func soleLive(t *testing.T, ctx context.Context, is pawlv1connect.InstanceServiceClient) func() bool {
	return func() bool {
		t.Helper()
		resp, err := is.ListInstances(ctx, connect.NewRequest(&pawlv1.ListInstancesRequest{}))
		if err != nil || len(resp.Msg.GetInstances()) != 1 {
			t.Fatalf("ListInstances = %v, %v", resp, err)
		}
		return resp.Msg.GetInstances()[0].GetLive()
	}
}

// leaseRunsOneTerm checks, after the stream that held an instance's
// lease (30s) was closed, that the lease runs one full term from then
// and lapses after it. The handler releases the lease before its
// watchers close: once the server counts no watcher, the lease runs from
// the release.
func leaseRunsOneTerm(t *testing.T, srv *testserver.Server, clock *testclock.Clock, live func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); srv.Server.WatchStats().Watchers != 0; {
		if time.Now().After(deadline) {
			t.Fatal("the stream's handler did not end")
		}
		time.Sleep(time.Millisecond)
	}
	clock.Advance(29 * time.Second)
	if !live() {
		t.Fatal("after its stream ended the instance did not have a full lease")
	}
	clock.Advance(2 * time.Second)
	if live() {
		t.Fatal("the lease outlived its term after the stream ended")
	}
}

// TestACKTraceContextIsCheckedAndKept: a malformed traceparent is refused
// and stores nothing; a valid one's trace ID shows in the ACK, the status
// and the applied records. An instance can fetch a release without its
// membership.
func TestACKTraceContextIsCheckedAndKept(t *testing.T) {
	srv := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newCanaryRollout(t, ctx, srv)
	register(t, c.is, "canary-1", "b", "zone-a", map[string]string{"canary": "true"})
	register(t, c.is, "main-1", "b", "zone-b", nil) // the everyone stage's member: a stage that takes nobody is refused
	rel := c.create(50)
	send := func(traceparent string) (*pawlv1.Ack, error) {
		resp, err := c.ro.Ack(ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: &pawlv1.Ack{
			ConfigId: "routing", Generation: rel.GetGeneration(), WorkloadIdentity: "canary-1", BootId: "b", ApplySequence: 1,
			MembershipEpoch: epochOf(t, c.is, "canary-1"), ContentDigest: rel.GetContentDigest(), ValidatorDigest: c.digest,
			State: pawlv1.InstanceState_INSTANCE_STATE_APPLIED, Traceparent: traceparent,
		}}))
		if err != nil {
			return nil, err
		}
		return resp.Msg.GetAck(), nil
	}
	if _, err := send("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"); connect.CodeOf(err) != connect.CodeInvalidArgument ||
		!strings.Contains(err.Error(), "the parent ID is not 16 lower-case hex digits") {
		t.Fatalf("a malformed traceparent = %v", err)
	}
	st, err := c.ro.GetRolloutStatus(ctx, connect.NewRequest(&pawlv1.GetRolloutStatusRequest{ConfigId: "routing", Generation: rel.GetGeneration()}))
	if err != nil || len(st.Msg.GetAcks()) != 0 {
		t.Fatalf("status after a refused ACK = %v, %v", st.Msg.GetAcks(), err)
	}
	a, err := send("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	if err != nil || a.GetTraceId() != "4bf92f3577b34da6a3ce929d0e0e4736" || !a.GetCounted() {
		t.Fatalf("ACK = %v, %v", a, err)
	}
	st, err = c.ro.GetRolloutStatus(ctx, connect.NewRequest(&pawlv1.GetRolloutStatusRequest{ConfigId: "routing", Generation: rel.GetGeneration()}))
	if err != nil || len(st.Msg.GetAcks()) != 1 || st.Msg.GetAcks()[0].GetTraceId() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("status = %v, %v", st.Msg.GetAcks(), err)
	}
	applied, err := c.ro.ListApplied(ctx, connect.NewRequest(&pawlv1.ListAppliedRequest{ConfigId: "routing"}))
	if err != nil || len(applied.Msg.GetApplied()) != 1 || applied.Msg.GetApplied()[0].GetTraceId() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("applied = %v, %v", applied.Msg.GetApplied(), err)
	}
	got, err := c.rs.GetRelease(ctx, connect.NewRequest(&pawlv1.GetReleaseRequest{ConfigId: "routing", Generation: rel.GetGeneration(), OmitMembership: true}))
	if r := got.Msg.GetRelease(); err != nil || len(r.GetMembership()) != 0 || r.GetMemberCount() != 2 || string(r.GetSpec().GetContent()) != string(rel.GetSpec().GetContent()) {
		t.Fatalf("release without membership = %v, %v", r, err)
	}
}
