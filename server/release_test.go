package server_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/sdk/canonical"
	"github.com/pawlcfg/pawl/server/internal/release"
)

func register(t *testing.T, is pawlv1connect.InstanceServiceClient, id, boot, zone string, labels map[string]string) {
	t.Helper()
	_, err := is.Register(context.Background(), connect.NewRequest(&pawlv1.RegisterRequest{Instance: &pawlv1.Instance{
		WorkloadIdentity: id, BootId: boot, Zone: zone, Role: "worker", TrafficWeight: 1, AppVersion: "1.0.0", Labels: labels,
	}}))
	if err != nil {
		t.Fatalf("Register(%s): %v", id, err)
	}
}

// epochOf is the membership epoch of id's current registration, which its
// ACKs carry.
func epochOf(t *testing.T, is pawlv1connect.InstanceServiceClient, id string) int64 {
	t.Helper()
	resp, err := is.ListInstances(context.Background(), connect.NewRequest(&pawlv1.ListInstancesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range resp.Msg.GetInstances() {
		if rec.GetInstance().GetWorkloadIdentity() == id {
			return rec.GetMembershipEpoch()
		}
	}
	t.Fatalf("%s is not registered", id)
	return 0
}

func releaseSpec(digest, content string) *pawlv1.ReleaseSpec {
	return &pawlv1.ReleaseSpec{
		ConfigId: "payments.routing", Content: []byte(content), MediaType: "application/json",
		ValidatorDigest: digest, Selector: map[string]string{"env": "prod"},
		Stages: []*pawlv1.Stage{
			{Name: "canary", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_FRACTION, Fraction: 0.1}},
			{Name: "zones", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ZONE_QUORUM, Fraction: 1}},
		},
		HealthWindow: durationpb.New(time.Minute), Deadline: durationpb.New(time.Hour),
	}
}

func TestInstancesAndReleasesEndToEnd(t *testing.T) {
	srv := testserver.Start(t)
	client := testserver.HTTPClient(t)
	is := pawlv1connect.NewInstanceServiceClient(client, srv.URL, connect.WithGRPC())
	rs := pawlv1connect.NewReleaseServiceClient(client, srv.URL, connect.WithGRPC())
	ctx := context.Background()
	prod := map[string]string{"env": "prod"}
	register(t, is, "pay-1", "boot-a", "zone-a", prod)
	register(t, is, "pay-2", "boot-a", "zone-b", prod)
	register(t, is, "pay-staging", "boot-a", "zone-a", map[string]string{"env": "staging"})

	if _, err := is.Heartbeat(ctx, connect.NewRequest(&pawlv1.HeartbeatRequest{WorkloadIdentity: "pay-1", BootId: "boot-a"})); err != nil {
		t.Fatal(err)
	}
	register(t, is, "pay-2", "boot-b", "zone-b", prod) // pay-2 restarted
	_, err := is.Heartbeat(ctx, connect.NewRequest(&pawlv1.HeartbeatRequest{WorkloadIdentity: "pay-2", BootId: "boot-a"}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "previous boot") {
		t.Fatalf("heartbeat of the old boot = %v", err)
	}
	_, err = is.Heartbeat(ctx, connect.NewRequest(&pawlv1.HeartbeatRequest{WorkloadIdentity: "nobody", BootId: "x"}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("heartbeat of an unknown instance = %v", err)
	}
	_, err = is.Register(ctx, connect.NewRequest(&pawlv1.RegisterRequest{Instance: &pawlv1.Instance{WorkloadIdentity: "no boot"}}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("bad registration = %v", err)
	}
	list, err := is.ListInstances(ctx, connect.NewRequest(&pawlv1.ListInstancesRequest{}))
	if err != nil || len(list.Msg.GetInstances()) != 3 || !list.Msg.GetInstances()[0].GetLive() {
		t.Fatalf("ListInstances = %v, %v", list, err)
	}

	digest := upload(t, newValidators(t, srv), "routing")
	req := connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: releaseSpec(digest, `{"upstreams":[{"host":"a","weight":100}]}`)})
	req.Header().Set("Pawl-Actor", "alice")
	created, err := rs.CreateRelease(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	rel := created.Msg.GetRelease()
	var members []string
	for _, m := range rel.GetMembership() {
		members = append(members, m.GetWorkloadIdentity()+"@"+m.GetZone())
	}
	if rel.GetGeneration() != 1 || rel.GetState() != pawlv1.ReleaseState_RELEASE_STATE_CANDIDATE || rel.GetCreatedBy() != "alice" ||
		!strings.HasPrefix(rel.GetContentDigest(), "sha256:") || strings.Join(members, ",") != "pay-1@zone-a,pay-2@zone-b" {
		t.Fatalf("release = %v (members %v)", rel, members)
	}

	// A config its validator rejects never becomes a release.
	_, err = rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: releaseSpec(digest, `{"upstreams":[{"host":"a","weight":50}]}`)}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "/upstreams: weights sum to 50; they must sum to 100") {
		t.Fatalf("rejected CreateRelease = %v", err)
	}
	var ce *connect.Error
	if !errors.As(err, &ce) || len(ce.Details()) != 1 {
		t.Fatalf("rejected CreateRelease has no detail: %v", err)
	}
	detail, derr := ce.Details()[0].Value()
	if rejected, ok := detail.(*pawlv1.ReleaseRejected); derr != nil || !ok || rejected.GetViolations()[0].GetPath() != "/upstreams" {
		t.Fatalf("detail = %v, %v", detail, derr)
	}

	second, err := rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: releaseSpec(digest, `{"upstreams":[{"host":"b","weight":100}]}`)}))
	if err != nil || second.Msg.GetRelease().GetGeneration() != 2 || second.Msg.GetRelease().GetPredecessor() != 1 {
		t.Fatalf("second release = %v, %v", second, err)
	}
	got, err := rs.GetRelease(ctx, connect.NewRequest(&pawlv1.GetReleaseRequest{ConfigId: "payments.routing", Generation: 1}))
	if err != nil || got.Msg.GetRelease().GetContentDigest() != rel.GetContentDigest() {
		t.Fatalf("GetRelease = %v, %v", got, err)
	}
	all, err := rs.ListReleases(ctx, connect.NewRequest(&pawlv1.ListReleasesRequest{ConfigId: "payments.routing"}))
	if err != nil || len(all.Msg.GetReleases()) != 2 {
		t.Fatalf("ListReleases = %v, %v", all, err)
	}
	_, err = rs.GetRelease(ctx, connect.NewRequest(&pawlv1.GetReleaseRequest{ConfigId: "payments.routing", Generation: 3}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("GetRelease(3) = %v", err)
	}
	bad := releaseSpec(digest, `{}`)
	bad.Stages[0].Policy.Kind = pawlv1.AckPolicyKind_ACK_POLICY_KIND_UNSPECIFIED
	if _, err := rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: bad})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("CreateRelease with no policy kind = %v", err)
	}
	// Release records are readable through the KV API, and not writable.
	kv := newKV(t, srv)
	if _, err := kv.Get(ctx, connect.NewRequest(&pawlv1.GetRequest{Key: "/_pawl/configs/payments.routing/head"})); err != nil {
		t.Fatalf("reading the head through KV: %v", err)
	}
}

// TestAPlanWithAStageOfNoMembersIsInvalidArgument: a plan whose later
// stage would assign the release to no instance (its members all taken by
// earlier stages) is refused with InvalidArgument naming the stage, and
// nothing is written.
func TestAPlanWithAStageOfNoMembersIsInvalidArgument(t *testing.T) {
	srv := testserver.Start(t)
	client := testserver.HTTPClient(t)
	is := pawlv1connect.NewInstanceServiceClient(client, srv.URL, connect.WithGRPC())
	rs := pawlv1connect.NewReleaseServiceClient(client, srv.URL, connect.WithGRPC())
	ctx := context.Background()
	register(t, is, "pay-1", "b", "zone-a", map[string]string{"env": "prod"})
	register(t, is, "pay-2", "b", "zone-b", map[string]string{"env": "prod"})
	digest := upload(t, newValidators(t, srv), "routing")
	spec := releaseSpec(digest, `{"upstreams":[{"host":"a","weight":100}]}`)
	spec.Stages = []*pawlv1.Stage{
		{Name: "validate", Shadow: true, Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}},
		{Name: "everyone", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}},
		{Name: "rest", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ZONE_QUORUM, Fraction: 0.9}},
	}
	_, err := rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: spec}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument ||
		!strings.Contains(err.Error(), `stage "rest" would assign the release to no instance: the 2 frozen members its selector matches are all taken by earlier stages (everyone)`) {
		t.Fatalf("CreateRelease with an empty later stage = %v", err)
	}
	all, err := rs.ListReleases(ctx, connect.NewRequest(&pawlv1.ListReleasesRequest{ConfigId: "payments.routing"}))
	if err != nil || len(all.Msg.GetReleases()) != 0 {
		t.Fatalf("ListReleases after the refusal = %v, %v", all, err)
	}
	// The shadow stage takes nobody away: the same plan without "rest" is
	// accepted.
	spec.Stages = spec.Stages[:2]
	if _, err := rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: spec})); err != nil {
		t.Fatalf("CreateRelease of a shadow stage and a stage of everyone = %v", err)
	}
}

// TestFiftyConcurrentPromoteCallsOverTheAPI: exactly one receipt, the others
// ABORTED with the pointer as it now is.
func TestFiftyConcurrentPromoteCallsOverTheAPI(t *testing.T) {
	srv := testserver.Start(t)
	client := testserver.HTTPClient(t)
	is := pawlv1connect.NewInstanceServiceClient(client, srv.URL, connect.WithGRPC())
	rs := pawlv1connect.NewReleaseServiceClient(client, srv.URL, connect.WithGRPC())
	ro := pawlv1connect.NewRolloutServiceClient(client, srv.URL, connect.WithGRPC())
	ctx := context.Background()
	register(t, is, "pay-1", "b", "zone-a", map[string]string{"env": "prod"})
	digest := upload(t, newValidators(t, srv), "routing")
	spec := releaseSpec(digest, `{"upstreams":[{"host":"a","weight":100}]}`)
	spec.HealthWindow = durationpb.New(0) // one HEALTHY_ACKED suffices; the race is the point
	spec.Stages = spec.Stages[:1]         // pay-1 is the canary; a second stage would assign nobody
	created, err := rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: spec}))
	if err != nil {
		t.Fatal(err)
	}
	rel := created.Msg.GetRelease()
	if _, err := ro.Ack(ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: &pawlv1.Ack{
		ConfigId: "payments.routing", Generation: 1, WorkloadIdentity: "pay-1", BootId: "b", ApplySequence: 1, MembershipEpoch: epochOf(t, is, "pay-1"),
		ContentDigest: rel.GetContentDigest(), ValidatorDigest: digest, State: pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED, HealthOk: true,
	}})); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	results := make(chan error, 50)
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := ro.Promote(ctx, connect.NewRequest(&pawlv1.PromoteRequest{ConfigId: "payments.routing", Generation: 1, IdempotencyKey: fmt.Sprintf("k%d", i)}))
			results <- err
		}()
	}
	wg.Wait()
	close(results)
	wins := 0
	for err := range results {
		switch {
		case err == nil:
			wins++
		case connect.CodeOf(err) == connect.CodeAborted:
			if !strings.Contains(err.Error(), "the active pointer is at generation 1 epoch 0") {
				t.Fatalf("loser's error = %v", err)
			}
		default:
			t.Fatalf("Promote = %v", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d promotions won", wins)
	}
	ptr, err := ro.GetPointer(ctx, connect.NewRequest(&pawlv1.GetPointerRequest{ConfigId: "payments.routing"}))
	if err != nil || ptr.Msg.GetPointer().GetGeneration() != 1 {
		t.Fatalf("pointer = %v, %v", ptr, err)
	}
	list, err := newKV(t, srv).List(ctx, connect.NewRequest(&pawlv1.ListRequest{Prefix: "/_pawl/configs/payments.routing/receipts/"}))
	if err != nil || len(list.Msg.GetKvs()) != 1 {
		t.Fatalf("receipts = %v, %v", list, err)
	}
}

// TestRolloutBadRequestsChangeNothing: each refused rollout request gets
// the code it should, says why, and leaves the store's revision where it
// was.
func TestRolloutBadRequestsChangeNothing(t *testing.T) {
	srv := testserver.Start(t)
	client := testserver.HTTPClient(t)
	is := pawlv1connect.NewInstanceServiceClient(client, srv.URL, connect.WithGRPC())
	rs := pawlv1connect.NewReleaseServiceClient(client, srv.URL, connect.WithGRPC())
	ro := pawlv1connect.NewRolloutServiceClient(client, srv.URL, connect.WithGRPC())
	kv := pawlv1connect.NewKVServiceClient(client, srv.URL, connect.WithGRPC())
	ctx := context.Background()
	register(t, is, "pay-1", "b", "zone-a", map[string]string{"env": "prod"})
	register(t, is, "pay-2", "b", "zone-b", map[string]string{"env": "prod"})
	digest := upload(t, newValidators(t, srv), "routing")
	spec := releaseSpec(digest, `{"upstreams":[{"host":"a","weight":100}]}`)
	spec.HealthWindow = durationpb.New(0)
	spec.Stages = []*pawlv1.Stage{{Name: "all", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}}}
	created, err := rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: spec}))
	if err != nil {
		t.Fatal(err)
	}
	rel := created.Msg.GetRelease()
	healthy := func(id string) *pawlv1.Ack {
		return &pawlv1.Ack{ConfigId: "payments.routing", Generation: 1, WorkloadIdentity: id, BootId: "b", ApplySequence: 1,
			MembershipEpoch: epochOf(t, is, id), ContentDigest: rel.GetContentDigest(), ValidatorDigest: digest,
			State: pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED, HealthOk: true}
	}
	for _, id := range []string{"pay-1", "pay-2"} {
		if _, err := ro.Ack(ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: healthy(id)})); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ro.Promote(ctx, connect.NewRequest(&pawlv1.PromoteRequest{ConfigId: "payments.routing", Generation: 1, IdempotencyKey: "k1"})); err != nil {
		t.Fatal(err)
	}
	noEpoch := healthy("pay-1")
	noEpoch.MembershipEpoch = 0
	badHealth := healthy("pay-1")
	badHealth.Health = &pawlv1.HealthMeasurement{ErrorRate: -0.5}
	bigParams := []byte(`{"pad":"` + strings.Repeat("x", release.MaxValidatorParamsBytes) + `"}`)
	bad := []struct {
		name string
		call func() error
		code connect.Code
		says string
	}{
		{"ACK without a membership epoch", func() error {
			_, err := ro.Ack(ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: noEpoch}))
			return err
		}, connect.CodeInvalidArgument, "membership_epoch is required"},
		{"ACK with a negative error rate", func() error {
			_, err := ro.Ack(ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: badHealth}))
			return err
		}, connect.CodeInvalidArgument, "error rate -0.5 must be in [0, 1]"},
		{"a promotion's key reused for a rollback", func() error {
			_, err := ro.Rollback(ctx, connect.NewRequest(&pawlv1.RollbackRequest{ConfigId: "payments.routing", ExpectedGeneration: 1, IdempotencyKey: "k1"}))
			return err
		}, connect.CodeAlreadyExists, "is the receipt of a promotion from generation 0 to 1"},
		{"retire without a reason", func() error {
			_, err := rs.RetireMember(ctx, connect.NewRequest(&pawlv1.RetireMemberRequest{ConfigId: "payments.routing", Generation: 1, WorkloadIdentity: "pay-2"}))
			return err
		}, connect.CodeInvalidArgument, "needs a reason"},
		{"retire a non-member", func() error {
			_, err := rs.RetireMember(ctx, connect.NewRequest(&pawlv1.RetireMemberRequest{ConfigId: "payments.routing", Generation: 1, WorkloadIdentity: "pay-9", Reason: "x"}))
			return err
		}, connect.CodeNotFound, "not in the frozen membership"},
		{"retire from a missing release", func() error {
			_, err := rs.RetireMember(ctx, connect.NewRequest(&pawlv1.RetireMemberRequest{ConfigId: "payments.routing", Generation: 7, WorkloadIdentity: "pay-2", Reason: "x"}))
			return err
		}, connect.CodeNotFound, "has no generation 7"},
		{"a foreign page token", func() error {
			_, err := ro.ListApplied(ctx, connect.NewRequest(&pawlv1.ListAppliedRequest{ConfigId: "payments.routing", PageToken: "AQ"}))
			return err
		}, connect.CodeInvalidArgument, "page_token"},
		{"applied of a malformed config ID", func() error {
			_, err := ro.ListApplied(ctx, connect.NewRequest(&pawlv1.ListAppliedRequest{ConfigId: "Bad/ID"}))
			return err
		}, connect.CodeInvalidArgument, "config ID"},
		{"a negative page size", func() error {
			_, err := ro.ListApplied(ctx, connect.NewRequest(&pawlv1.ListAppliedRequest{ConfigId: "payments.routing", PageSize: -1}))
			return err
		}, connect.CodeInvalidArgument, "page_size"},
		{"a release of more stages than the limit", func() error {
			many := proto.Clone(spec).(*pawlv1.ReleaseSpec)
			many.Stages = nil
			for i := range release.MaxStages + 1 {
				many.Stages = append(many.Stages, &pawlv1.Stage{Name: fmt.Sprintf("s%d", i), Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}})
			}
			_, err := rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: many}))
			return err
		}, connect.CodeInvalidArgument, fmt.Sprintf("the stage plan has %d stages; the limit is %d", release.MaxStages+1, release.MaxStages)},
		{"a release's validator_params over the limit", func() error {
			big := proto.Clone(spec).(*pawlv1.ReleaseSpec)
			big.ValidatorParams = bigParams
			_, err := rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: big}))
			return err
		}, connect.CodeInvalidArgument, fmt.Sprintf("validator_params is %d bytes; the limit is %d bytes", len(bigParams), release.MaxValidatorParamsBytes)},
		{"a release nested deeper than the canonical form allows", func() error {
			deep := proto.Clone(spec).(*pawlv1.ReleaseSpec)
			deep.Content = []byte(strings.Repeat("[", canonical.MaxDepth+2) + strings.Repeat("]", canonical.MaxDepth+2)) // the innermost array inside MaxDepth+1
			_, err := rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: deep}))
			return err
		}, connect.CodeInvalidArgument, fmt.Sprintf("nested deeper than %d arrays and objects", canonical.MaxDepth)},
		{"a dry run's params over the limit", func() error {
			_, err := newValidators(t, srv).Validate(ctx, connect.NewRequest(&pawlv1.ValidateRequest{Digest: digest, Content: spec.GetContent(), Params: bigParams}))
			return err
		}, connect.CodeInvalidArgument, fmt.Sprintf("params is %d bytes; the limit is %d bytes", len(bigParams), release.MaxValidatorParamsBytes)},
		{"stop the active release", func() error {
			_, err := ro.StopRollout(ctx, connect.NewRequest(&pawlv1.StopRolloutRequest{ConfigId: "payments.routing", Generation: 1, Reason: "x"}))
			return err
		}, connect.CodeFailedPrecondition, "roll back instead"},
	}
	revision := func() int64 {
		t.Helper()
		resp, err := kv.List(ctx, connect.NewRequest(&pawlv1.ListRequest{Prefix: "/nothing/"}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.GetRevision()
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			before := revision()
			err := tt.call()
			if connect.CodeOf(err) != tt.code || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("= %v; want %s saying %q", err, tt.code, tt.says)
			}
			if after := revision(); after != before {
				t.Fatalf("the refused request moved the revision from %d to %d", before, after)
			}
		})
	}
	// Retiring from the active release is allowed, and once only.
	if _, err := rs.RetireMember(ctx, connect.NewRequest(&pawlv1.RetireMemberRequest{ConfigId: "payments.routing", Generation: 1, WorkloadIdentity: "pay-2", Reason: "gone"})); err != nil {
		t.Fatal(err)
	}
	_, err = rs.RetireMember(ctx, connect.NewRequest(&pawlv1.RetireMemberRequest{ConfigId: "payments.routing", Generation: 1, WorkloadIdentity: "pay-2", Reason: "gone"}))
	if connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Fatalf("second retirement = %v", err)
	}
}

// TestListingsArePaged: releases come a page at a time, without membership
// and content unless asked for (member_count always set); generation 0 is
// the newest; a status carries one page of ACKs and a token for the next,
// every page read at the revision of the first.
func TestListingsArePaged(t *testing.T) {
	srv := testserver.Start(t)
	client := testserver.HTTPClient(t)
	is := pawlv1connect.NewInstanceServiceClient(client, srv.URL, connect.WithGRPC())
	rs := pawlv1connect.NewReleaseServiceClient(client, srv.URL, connect.WithGRPC())
	ro := pawlv1connect.NewRolloutServiceClient(client, srv.URL, connect.WithGRPC())
	ctx := context.Background()
	for _, id := range []string{"pay-1", "pay-2", "pay-3"} {
		register(t, is, id, "b", "zone-a", map[string]string{"env": "prod"})
	}
	digest := upload(t, newValidators(t, srv), "routing")
	for i := range 5 {
		spec := releaseSpec(digest, fmt.Sprintf(`{"upstreams":[{"host":"h%d","weight":100}]}`, i))
		spec.Stages = []*pawlv1.Stage{{Name: "all", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}}}
		spec.HealthWindow = durationpb.New(0)
		if _, err := rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: spec})); err != nil {
			t.Fatal(err)
		}
	}
	var gens []int64
	for token := ""; ; {
		resp, err := rs.ListReleases(ctx, connect.NewRequest(&pawlv1.ListReleasesRequest{ConfigId: "payments.routing", PageSize: 2, PageToken: token}))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range resp.Msg.GetReleases() {
			if len(r.GetMembership()) != 0 || len(r.GetSpec().GetContent()) != 0 || r.GetMemberCount() != 3 {
				t.Fatalf("listed release %d has membership %d, content %d bytes, member_count %d", r.GetGeneration(), len(r.GetMembership()), len(r.GetSpec().GetContent()), r.GetMemberCount())
			}
			gens = append(gens, r.GetGeneration())
		}
		if token = resp.Msg.GetNextPageToken(); token == "" {
			break
		}
	}
	if fmt.Sprint(gens) != "[1 2 3 4 5]" {
		t.Fatalf("pages listed generations %v", gens)
	}
	full, err := rs.ListReleases(ctx, connect.NewRequest(&pawlv1.ListReleasesRequest{ConfigId: "payments.routing", PageSize: 1, IncludeMembership: true, IncludeContent: true}))
	if err != nil || len(full.Msg.GetReleases()[0].GetMembership()) != 3 || len(full.Msg.GetReleases()[0].GetSpec().GetContent()) == 0 {
		t.Fatalf("a listing asking for membership and content = %v, %v", full, err)
	}
	if _, err := rs.ListReleases(ctx, connect.NewRequest(&pawlv1.ListReleasesRequest{ConfigId: "other", PageToken: full.Msg.GetNextPageToken()})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("a token of another config = %v", err)
	}
	newest, err := rs.GetRelease(ctx, connect.NewRequest(&pawlv1.GetReleaseRequest{ConfigId: "payments.routing"}))
	if err != nil || newest.Msg.GetRelease().GetGeneration() != 5 {
		t.Fatalf("generation 0 = %v, %v", newest, err)
	}
	if _, err := rs.GetRelease(ctx, connect.NewRequest(&pawlv1.GetReleaseRequest{ConfigId: "nothing.yet"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("the newest release of a config without one = %v", err)
	}

	rel := newest.Msg.GetRelease()
	for _, id := range []string{"pay-1", "pay-2", "pay-3"} {
		for seq, state := range []pawlv1.InstanceState{pawlv1.InstanceState_INSTANCE_STATE_APPLIED, pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED} {
			if _, err := ro.Ack(ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: &pawlv1.Ack{ConfigId: "payments.routing", Generation: 5,
				WorkloadIdentity: id, BootId: "b", MembershipEpoch: epochOf(t, is, id), ApplySequence: int64(seq + 1),
				ContentDigest: rel.GetContentDigest(), ValidatorDigest: digest, State: state, HealthOk: true}})); err != nil {
				t.Fatal(err)
			}
		}
	}
	var acks []string
	pages := 0
	for token := ""; ; pages++ {
		resp, err := ro.GetRolloutStatus(ctx, connect.NewRequest(&pawlv1.GetRolloutStatusRequest{ConfigId: "payments.routing", Generation: 5,
			AckPageSize: 4, AckPageToken: token}))
		if err != nil {
			t.Fatal(err)
		}
		if pages == 0 && resp.Msg.GetStages()[0].GetHealthy() != 3 {
			t.Fatalf("stage %v", resp.Msg.GetStages()[0])
		}
		for _, a := range resp.Msg.GetAcks() {
			acks = append(acks, a.GetWorkloadIdentity()+"/"+a.GetState().String())
		}
		if pages == 0 {
			// An ACK after the first page is not in the later ones: every
			// page is read at the revision of the first.
			if _, err := ro.Ack(ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: &pawlv1.Ack{ConfigId: "payments.routing", Generation: 5,
				WorkloadIdentity: "pay-3", BootId: "b", MembershipEpoch: epochOf(t, is, "pay-3"), ApplySequence: 3,
				ContentDigest: rel.GetContentDigest(), ValidatorDigest: digest, State: pawlv1.InstanceState_INSTANCE_STATE_APPLIED}})); err != nil {
				t.Fatal(err)
			}
		}
		if token = resp.Msg.GetNextAckPageToken(); token == "" {
			break
		}
	}
	if len(acks) != 6 || pages != 1 {
		t.Fatalf("%d ACKs over %d pages: %v", len(acks), pages+1, acks)
	}
	if _, err := ro.GetRolloutStatus(ctx, connect.NewRequest(&pawlv1.GetRolloutStatusRequest{ConfigId: "payments.routing", Generation: 4,
		AckPageToken: "AQ"})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("a malformed ACK page token = %v", err)
	}
}
