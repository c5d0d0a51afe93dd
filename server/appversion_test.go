package server_test

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
)

// TestADowngradedInstanceIsNeitherAssignedNorCounted: an instance that
// restarts below a release's minimum app version is no longer assigned
// that release (it gets the active generation when it may run that, and
// nothing when it may not), and its reports of the release do not count,
// nor does a report that names a version below the minimum.
func TestADowngradedInstanceIsNeitherAssignedNorCounted(t *testing.T) {
	srv := testserver.Start(t)
	client := testserver.HTTPClient(t)
	is := pawlv1connect.NewInstanceServiceClient(client, srv.URL)
	rs := pawlv1connect.NewReleaseServiceClient(client, srv.URL)
	ro := pawlv1connect.NewRolloutServiceClient(client, srv.URL)
	ctx := context.Background()
	digest := upload(t, newValidators(t, srv), "routing")
	registerAs := func(id, boot, version string) {
		t.Helper()
		_, err := is.Register(ctx, connect.NewRequest(&pawlv1.RegisterRequest{Instance: &pawlv1.Instance{
			WorkloadIdentity: id, BootId: boot, Zone: "zone-a", TrafficWeight: 1, AppVersion: version}}))
		if err != nil {
			t.Fatal(err)
		}
	}
	create := func(config, minVersion string) *pawlv1.Release {
		t.Helper()
		resp, err := rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: &pawlv1.ReleaseSpec{
			ConfigId: config, Content: []byte(`{"upstreams":[{"host":"a","weight":100}]}`), MediaType: "application/json",
			ValidatorDigest: digest, MinAppVersion: minVersion,
			Stages:       []*pawlv1.Stage{{Name: "all", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}}},
			HealthWindow: durationpb.New(0), Deadline: durationpb.New(time.Hour),
		}}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.GetRelease()
	}
	healthy := func(rel *pawlv1.Release, id, boot, appVersion string) *pawlv1.Ack {
		t.Helper()
		resp, err := ro.Ack(ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: &pawlv1.Ack{
			ConfigId: rel.GetSpec().GetConfigId(), Generation: rel.GetGeneration(), WorkloadIdentity: id, BootId: boot,
			MembershipEpoch: epochOf(t, is, id), ContentDigest: rel.GetContentDigest(), ValidatorDigest: digest, AppVersion: appVersion,
			ApplySequence: rel.GetGeneration(), State: pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED, HealthOk: true,
		}}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.GetAck()
	}
	promote := func(rel *pawlv1.Release) {
		t.Helper()
		for _, id := range []string{"pay-1", "pay-2"} {
			if a := healthy(rel, id, "boot-a", ""); !a.GetCounted() {
				t.Fatalf("HEALTHY_ACKED of %s = %v", id, a)
			}
		}
		_, err := ro.Promote(ctx, connect.NewRequest(&pawlv1.PromoteRequest{ConfigId: rel.GetSpec().GetConfigId(), Generation: 1, IdempotencyKey: "p-" + rel.GetSpec().GetConfigId()}))
		if err != nil {
			t.Fatal(err)
		}
	}
	assigned := func(id string) string {
		t.Helper()
		stream, err := is.WatchAssignments(ctx, connect.NewRequest(&pawlv1.WatchAssignmentsRequest{WorkloadIdentity: id}))
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Close()
		if !stream.Receive() {
			t.Fatalf("assignments of %s: %v", id, stream.Err())
		}
		got := strings.Fields(render(stream.Msg()))
		sort.Strings(got)
		return strings.Join(got, " ")
	}

	registerAs("pay-1", "boot-a", "2.1.0")
	registerAs("pay-2", "boot-a", "2.1.0")
	promote(create("routing", ""))     // active: any version may run it
	promote(create("limits", "2.0.0")) // active: 2.0.0 or later only
	candidate := create("routing", "2.0.0")
	// pay-1 comes back with an older build.
	registerAs("pay-1", "boot-b", "1.9.0")

	if got := assigned("pay-1"); got != "routing@1" {
		t.Fatalf("the downgraded instance is assigned %q; want only the active routing@1 (not routing@2, not limits@1, whose minimum is 2.0.0)", got)
	}
	if got := assigned("pay-2"); got != "limits@1 routing@2:all" {
		t.Fatalf("pay-2 is assigned %q; want limits@1 routing@2:all", got)
	}
	if a := healthy(candidate, "pay-1", "boot-b", ""); a.GetCounted() ||
		!strings.Contains(a.GetNotCountedReason(), `app version below minimum: the instance registered with app version "1.9.0", below the release's minimum 2.0.0`) {
		t.Fatalf("HEALTHY_ACKED of the downgraded instance = %v: want it not counted", a)
	}
	if a := healthy(candidate, "pay-2", "boot-a", "1.9.0"); a.GetCounted() ||
		!strings.Contains(a.GetNotCountedReason(), `app version below minimum: the ACK reports app version "1.9.0"`) {
		t.Fatalf("HEALTHY_ACKED naming version 1.9.0 = %v: want it not counted", a)
	}
	if a := healthy(candidate, "pay-2", "boot-a", "2.1.0"); !a.GetCounted() {
		t.Fatalf("HEALTHY_ACKED of pay-2 at 2.1.0 = %v: want it counted", a)
	}
	st, err := ro.GetRolloutStatus(ctx, connect.NewRequest(&pawlv1.GetRolloutStatusRequest{ConfigId: "routing", Generation: 2}))
	if err != nil {
		t.Fatal(err)
	}
	if stage := st.Msg.GetStages()[0]; stage.GetHealthy() != 1 || stage.GetOutcome() != "waiting" {
		t.Fatalf("stage = %v: want 1 healthy, waiting on the downgraded member", stage)
	}
}
