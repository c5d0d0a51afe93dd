package server_test

import (
	"context"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
)

// badFloats are the values no float field of a request may carry into a
// record: NaN and the infinities, whatever the field's range.
var badFloats = map[string]float64{"NaN": math.NaN(), "+Inf": math.Inf(1), "-Inf": math.Inf(-1)}

// TestEveryFloatOfARequestIsChecked sends every float field of the API's
// requests (traffic weight, a policy's fraction, a budget's error rate, an
// ACK's measured error rate) with NaN, the infinities and values outside
// its range: each is refused with INVALID_ARGUMENT naming the field, and
// the store's revision does not move.
func TestEveryFloatOfARequestIsChecked(t *testing.T) {
	srv := testserver.Start(t)
	client := testserver.HTTPClient(t)
	is := pawlv1connect.NewInstanceServiceClient(client, srv.URL)
	rs := pawlv1connect.NewReleaseServiceClient(client, srv.URL)
	ro := pawlv1connect.NewRolloutServiceClient(client, srv.URL)
	kv := pawlv1connect.NewKVServiceClient(client, srv.URL)
	ctx := context.Background()
	digest := upload(t, newValidators(t, srv), "routing")
	register(t, is, "pay-1", "boot-a", "zone-a", map[string]string{"env": "prod"})
	register(t, is, "pay-3", "boot-a", "zone-b", map[string]string{"env": "prod"}) // the zones stage takes one
	spec := releaseSpec(digest, `{"upstreams":[{"host":"a","weight":100}]}`)
	rel, err := rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: spec}))
	if err != nil {
		t.Fatal(err)
	}

	type call struct {
		name string
		// field is what the error message must name.
		field string
		send  func(v float64) error
	}
	registerWith := func(v float64) error {
		_, err := is.Register(ctx, connect.NewRequest(&pawlv1.RegisterRequest{Instance: &pawlv1.Instance{
			WorkloadIdentity: "pay-2", BootId: "boot-a", Zone: "zone-a", TrafficWeight: v, AppVersion: "1.0.0"}}))
		return err
	}
	policyWith := func(kind pawlv1.AckPolicyKind) func(float64) error {
		return func(v float64) error {
			s := releaseSpec(digest, `{"upstreams":[{"host":"b","weight":100}]}`)
			s.Stages[1].Policy = &pawlv1.AckPolicy{Kind: kind, Fraction: v}
			_, err := rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: s}))
			return err
		}
	}
	budgetWith := func(v float64) error {
		s := releaseSpec(digest, `{"upstreams":[{"host":"b","weight":100}]}`)
		s.Stages[1].Budget = &pawlv1.HealthBudget{MaxErrorRate: &v}
		_, err := rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: s}))
		return err
	}
	ackWith := func(v float64) error {
		r := rel.Msg.GetRelease()
		_, err := ro.Ack(ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: &pawlv1.Ack{
			ConfigId: r.GetSpec().GetConfigId(), Generation: r.GetGeneration(), WorkloadIdentity: "pay-1", BootId: "boot-a",
			MembershipEpoch: epochOf(t, is, "pay-1"), ContentDigest: r.GetContentDigest(), ValidatorDigest: digest, ApplySequence: 1,
			State: pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED, HealthOk: true,
			Health: &pawlv1.HealthMeasurement{ErrorRate: v, P99Latency: durationpb.New(time.Millisecond)}}}))
		return err
	}
	calls := []struct {
		call
		outOfRange []float64
	}{
		{call{"Register traffic_weight", "traffic weight", registerWith}, []float64{-1, -math.SmallestNonzeroFloat64, 1e10}},
		{call{"CreateRelease FRACTION policy", "fraction", policyWith(pawlv1.AckPolicyKind_ACK_POLICY_KIND_FRACTION)}, []float64{0, -0.5, 1.5}},
		{call{"CreateRelease ZONE_QUORUM policy", "fraction", policyWith(pawlv1.AckPolicyKind_ACK_POLICY_KIND_ZONE_QUORUM)}, []float64{0, -0.5, 1.5}},
		{call{"CreateRelease TRAFFIC_WEIGHT policy", "fraction", policyWith(pawlv1.AckPolicyKind_ACK_POLICY_KIND_TRAFFIC_WEIGHT)}, []float64{0, -0.5, 1.5}},
		{call{"CreateRelease max_error_rate", "max error rate", budgetWith}, []float64{-0.1, 1.5}},
		{call{"Ack health error_rate", "error rate", ackWith}, []float64{-0.1, 1.5}},
	}
	revision := func() int64 {
		t.Helper()
		resp, err := kv.List(ctx, connect.NewRequest(&pawlv1.ListRequest{Prefix: "/", PageSize: 1}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.GetRevision()
	}
	for _, c := range calls {
		values := map[string]float64{}
		for name, v := range badFloats {
			values[name] = v
		}
		for _, v := range c.outOfRange {
			values[strconv.FormatFloat(v, 'g', -1, 64)] = v
		}
		for name, v := range values {
			t.Run(c.name+"="+name, func(t *testing.T) {
				before := revision()
				err := c.send(v)
				if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), c.field) {
					t.Fatalf("%s = %v: want INVALID_ARGUMENT naming the %s", c.name, err, c.field)
				}
				if after := revision(); after != before {
					t.Fatalf("the refused request moved the store from revision %d to %d", before, after)
				}
			})
		}
	}
	list, err := is.ListInstances(ctx, connect.NewRequest(&pawlv1.ListInstancesRequest{}))
	if err != nil || len(list.Msg.GetInstances()) != 2 { // pay-1 and pay-3; never pay-2
		t.Fatalf("a refused registration was recorded: %v, %v", list, err)
	}
}
