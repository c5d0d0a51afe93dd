package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
)

// TestRejectedViolationsAreBoundedAndRedacted: a REJECTED ACK carries the
// validator's violations and a reject code; the server stores them, with
// the release's secret values redacted from their messages and paths as
// from the reason, and returns them in the rollout status. More than 256
// violations, a violation longer than the text bound, violations on
// another state and an unknown reject code are refused with
// InvalidArgument naming the limit, and store nothing.
func TestRejectedViolationsAreBoundedAndRedacted(t *testing.T) {
	srv := testserver.Start(t)
	digest := upload(t, newValidators(t, srv), "routing")
	const token = "s3cr3t-token-0123456789"
	overConnectAndGRPC(t, func(t *testing.T, ctx context.Context, p protocol) {
		is := pawlv1connect.NewInstanceServiceClient(p.client(t), srv.URL, p.opts...)
		rs := pawlv1connect.NewReleaseServiceClient(p.client(t), srv.URL, p.opts...)
		ro := pawlv1connect.NewRolloutServiceClient(p.client(t), srv.URL, p.opts...)
		id := "pay-" + p.name
		if _, err := is.Register(ctx, connect.NewRequest(&pawlv1.RegisterRequest{Instance: &pawlv1.Instance{
			WorkloadIdentity: id, BootId: "boot-a", Zone: "zone-a", TrafficWeight: 1}})); err != nil {
			t.Fatal(err)
		}
		created, err := rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: &pawlv1.ReleaseSpec{
			ConfigId: "api-" + p.name, MediaType: "application/json", ValidatorDigest: digest,
			Content:      []byte(`{"upstreams":[{"host":"a","weight":100,"token":"` + token + `"}]}`),
			Stages:       []*pawlv1.Stage{{Name: "all", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}}},
			HealthWindow: durationpb.New(0), Deadline: durationpb.New(time.Hour)}}))
		if err != nil {
			t.Fatal(err)
		}
		rel := created.Msg.GetRelease()
		epoch := epochOf(t, is, id)
		ack := func(edit func(*pawlv1.Ack)) error {
			a := &pawlv1.Ack{
				ConfigId: rel.GetSpec().GetConfigId(), Generation: rel.GetGeneration(), WorkloadIdentity: id, BootId: "boot-a",
				MembershipEpoch: epoch, ContentDigest: rel.GetContentDigest(), ValidatorDigest: digest, ApplySequence: 1,
				State: pawlv1.InstanceState_INSTANCE_STATE_REJECTED, Reason: "the validator rejected the content",
				RejectCode: pawlv1.RejectCode_REJECT_CODE_INVALID_CONTENT,
			}
			edit(a)
			_, err := ro.Ack(ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: a}))
			return err
		}
		many := func(n int) []*pawlv1.Violation {
			out := make([]*pawlv1.Violation, n)
			for i := range out {
				out[i] = &pawlv1.Violation{Path: fmt.Sprintf("/upstreams/%d/weight", i), Message: "must be positive", Severity: pawlv1.Severity_SEVERITY_ERROR}
			}
			return out
		}
		for _, c := range []struct {
			name, want string
			edit       func(*pawlv1.Ack)
		}{
			{"257 violations", "violations has 257 entries; the limit is 256", func(a *pawlv1.Ack) { a.Violations = many(257) }},
			{"a long message", "is 5000 bytes; the limit is 4096 bytes (pawld --max-text-bytes)", func(a *pawlv1.Ack) {
				a.Violations = []*pawlv1.Violation{{Path: "/x", Message: strings.Repeat("m", 5000)}}
			}},
			{"violations on APPLIED", "violations and reject_code belong to a REJECTED ACK, not APPLIED", func(a *pawlv1.Ack) {
				a.State, a.Reason, a.Violations = pawlv1.InstanceState_INSTANCE_STATE_APPLIED, "", many(1)
			}},
			{"an unknown reject code", "reject_code 99 is not a RejectCode", func(a *pawlv1.Ack) { a.RejectCode = 99 }},
		} {
			wantCode(t, c.name, ack(c.edit), connect.CodeInvalidArgument, c.want)
		}
		status := func() []*pawlv1.Ack {
			st, err := ro.GetRolloutStatus(ctx, connect.NewRequest(&pawlv1.GetRolloutStatusRequest{ConfigId: rel.GetSpec().GetConfigId(), Generation: rel.GetGeneration()}))
			if err != nil {
				t.Fatal(err)
			}
			return st.Msg.GetAcks()
		}
		if acks := status(); len(acks) != 0 {
			t.Fatalf("refused ACKs were stored: %v", acks)
		}

		if err := ack(func(a *pawlv1.Ack) {
			a.Violations = append(many(255), &pawlv1.Violation{Path: "/upstreams/0/" + token, Message: "token " + token + " was refused upstream",
				Severity: pawlv1.Severity_SEVERITY_WARNING})
		}); err != nil {
			t.Fatal(err)
		}
		acks := status()
		if len(acks) != 1 {
			t.Fatalf("stored %d ACKs, want 1", len(acks))
		}
		got := acks[0]
		if got.GetRejectCode() != pawlv1.RejectCode_REJECT_CODE_INVALID_CONTENT || len(got.GetViolations()) != 256 {
			t.Fatalf("stored code %s and %d violations", got.GetRejectCode(), len(got.GetViolations()))
		}
		last := got.GetViolations()[255]
		if last.GetMessage() != "token [redacted] was refused upstream" || last.GetPath() != "/upstreams/0/[redacted]" ||
			last.GetSeverity() != pawlv1.Severity_SEVERITY_WARNING {
			t.Fatalf("the last violation is stored as %v; want the token redacted", last)
		}
		if first := got.GetViolations()[0]; first.GetPath() != "/upstreams/0/weight" || first.GetMessage() != "must be positive" {
			t.Fatalf("the first violation is stored as %v", first)
		}
	})
}
