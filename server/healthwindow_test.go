package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/redistest"
	"github.com/pawlcfg/pawl/internal/testkit/testclock"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/server"
)

// windowRelease cuts a release of "payments.routing" through is and rs
// (one stage of every member, a 60-second health window), and returns it.
func windowRelease(t *testing.T, srv *testserver.Server, edit func(*pawlv1.ReleaseSpec)) *pawlv1.Release {
	t.Helper()
	rs := pawlv1connect.NewReleaseServiceClient(testserver.HTTPClient(t), srv.URL)
	spec := releaseSpec(upload(t, newValidators(t, srv), "routing"), `{"upstreams":[{"host":"a","weight":100}]}`)
	spec.Stages = []*pawlv1.Stage{{Name: "all", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}}}
	spec.HealthWindow = durationpb.New(time.Minute)
	if edit != nil {
		edit(spec)
	}
	resp, err := rs.CreateRelease(context.Background(), connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: spec}))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Msg.GetRelease()
}

// reportTo sends id's report of rel at apply sequence 1 (boot "boot-a")
// through ro, with held as the instance's own measure of its hold (nil:
// none), and returns it as judged.
func reportTo(t *testing.T, ro pawlv1connect.RolloutServiceClient, is pawlv1connect.InstanceServiceClient, rel *pawlv1.Release, id string,
	state pawlv1.InstanceState, held *durationpb.Duration) (*pawlv1.Ack, error) {
	t.Helper()
	resp, err := ro.Ack(context.Background(), connect.NewRequest(&pawlv1.AckRequest{Ack: &pawlv1.Ack{
		ConfigId: rel.GetSpec().GetConfigId(), Generation: rel.GetGeneration(), WorkloadIdentity: id, BootId: "boot-a",
		MembershipEpoch: epochOf(t, is, id), ContentDigest: rel.GetContentDigest(), ValidatorDigest: rel.GetSpec().GetValidatorDigest(),
		ApplySequence: 1, State: state, HealthOk: true, Held: held,
	}}))
	if err != nil {
		return nil, err
	}
	return resp.Msg.GetAck(), nil
}

// TestAHoldShorterThanTheWindowNeverCountsOnASkewedReplica runs two
// replicas on one Redis, the second's clock a minute ahead of the
// first's. An instance reports APPLIED to the first and, ten seconds
// later, HEALTHY_ACKED to the second: by the two servers' wall clocks 70
// seconds passed, but the instance held the release for 10 of the
// window's 60, and the report must not count. After the full minute it
// counts.
func TestAHoldShorterThanTheWindowNeverCountsOnASkewedReplica(t *testing.T) {
	_, prefix := redistest.Shared(t)
	start := time.Now()
	clockA, clockB := testclock.New(start), testclock.New(start.Add(time.Minute))
	onRedis := []server.Option{server.WithStore("redis://" + redistest.Addr() + "/0"), server.WithRedisPrefix(prefix)}
	a := testserver.Start(t, append(onRedis, server.WithClock(clockA.Now))...)
	b := testserver.Start(t, append(onRedis, server.WithClock(clockB.Now))...)
	client := testserver.HTTPClient(t)
	isA := pawlv1connect.NewInstanceServiceClient(client, a.URL)
	roA, roB := pawlv1connect.NewRolloutServiceClient(client, a.URL), pawlv1connect.NewRolloutServiceClient(client, b.URL)
	register(t, isA, "pay-1", "boot-a", "zone-a", map[string]string{"env": "prod"})
	rel := windowRelease(t, a, nil)
	tick := func(d time.Duration) { clockA.Advance(d); clockB.Advance(d) }

	if got, err := reportTo(t, roA, isA, rel, "pay-1", pawlv1.InstanceState_INSTANCE_STATE_APPLIED, nil); err != nil || !got.GetCounted() {
		t.Fatalf("APPLIED through the first replica = %v, %v", got, err)
	}
	tick(10 * time.Second)
	got, err := reportTo(t, roB, isA, rel, "pay-1", pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED, durationpb.New(10*time.Second))
	if err != nil || got.GetCounted() || !strings.Contains(got.GetNotCountedReason(), "health window: the instance held apply sequence 1 for 10s") {
		t.Fatalf("HEALTHY_ACKED after a 10s hold, through the replica a minute ahead = %v, %v: want it not counted", got, err)
	}
	tick(50 * time.Second)
	got, err = reportTo(t, roB, isA, rel, "pay-1", pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED, durationpb.New(time.Minute))
	if err != nil || !got.GetCounted() {
		t.Fatalf("HEALTHY_ACKED after the full window = %v, %v: want it counted", got, err)
	}
}

// TestAClockSteppingForwardDoesNotShortenTheHealthWindow steps the
// server's clock a minute forward between an instance's APPLIED and its
// HEALTHY_ACKED ten seconds later: the report does not count. Neither does
// one that says nothing of its hold, nor one claiming a hold the server
// saw did not pass (the server's own measure still bounds a hurried
// client); a negative hold is refused.
func TestAClockSteppingForwardDoesNotShortenTheHealthWindow(t *testing.T) {
	clock := testclock.New(time.Now())
	srv := testserver.Start(t, server.WithClock(clock.Now))
	client := testserver.HTTPClient(t)
	is := pawlv1connect.NewInstanceServiceClient(client, srv.URL)
	ro := pawlv1connect.NewRolloutServiceClient(client, srv.URL)
	prod := map[string]string{"env": "prod"}
	register(t, is, "pay-1", "boot-a", "zone-a", prod)
	register(t, is, "pay-2", "boot-a", "zone-a", prod)
	rel := windowRelease(t, srv, nil)
	healthy := pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED
	for _, id := range []string{"pay-1", "pay-2"} {
		if got, err := reportTo(t, ro, is, rel, id, pawlv1.InstanceState_INSTANCE_STATE_APPLIED, nil); err != nil || !got.GetCounted() {
			t.Fatalf("APPLIED of %s = %v, %v", id, got, err)
		}
	}

	// pay-2 claims the window while the server saw 10 seconds pass.
	clock.Advance(10 * time.Second)
	if got, err := reportTo(t, ro, is, rel, "pay-2", healthy, durationpb.New(time.Minute)); err != nil || got.GetCounted() ||
		!strings.Contains(got.GetNotCountedReason(), "healthy 10s after APPLIED, but the release's health window is 1m0s") {
		t.Fatalf("HEALTHY_ACKED claiming a hold the server did not see = %v, %v", got, err)
	}
	clock.Advance(time.Minute) // the server's clock steps forward
	if got, err := reportTo(t, ro, is, rel, "pay-1", healthy, durationpb.New(10*time.Second)); err != nil || got.GetCounted() ||
		!strings.Contains(got.GetNotCountedReason(), "the instance held apply sequence 1 for 10s by its own clock (held), but the release's health window is 1m0s") {
		t.Fatalf("HEALTHY_ACKED 10s after APPLIED, across a step of the server's clock = %v, %v", got, err)
	}
	if got, err := reportTo(t, ro, is, rel, "pay-1", healthy, nil); err != nil || got.GetCounted() || !strings.Contains(got.GetNotCountedReason(), "for 0s by its own clock (held)") {
		t.Fatalf("HEALTHY_ACKED without held = %v, %v", got, err)
	}
	if _, err := reportTo(t, ro, is, rel, "pay-1", healthy, durationpb.New(-time.Second)); connect.CodeOf(err) != connect.CodeInvalidArgument ||
		!strings.Contains(err.Error(), "held -1s is negative") {
		t.Fatalf("HEALTHY_ACKED with a negative hold = %v", err)
	}
	clock.Advance(50 * time.Second)
	if got, err := reportTo(t, ro, is, rel, "pay-1", healthy, durationpb.New(time.Minute)); err != nil || !got.GetCounted() {
		t.Fatalf("HEALTHY_ACKED after the window by both measures = %v, %v", got, err)
	}
}
