package sdk_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/internal/testkit/faultproxy"
	"github.com/pawlcfg/pawl/internal/testkit/wasmbuild"
	"github.com/pawlcfg/pawl/sdk"
)

// TestRejectedACKsCarryTheViolations: an instance whose validator
// refuses a release (a man in the middle tightened the validator's
// schema in the release it gets) reports REJECTED with the reject
// code INVALID_CONTENT and the validator's violations as structured
// data: 300 of them are cut to the server's 256, the last saying how many
// more there were, and the server takes the ACK.
func TestRejectedACKsCarryTheViolations(t *testing.T) {
	h := newHarness(t)
	up, err := h.vs.Upload(h.ctx, connect.NewRequest(&pawlv1.UploadRequest{Wasm: wasmbuild.Build(t, "jsonschema"), Name: "jsonschema"}))
	if err != nil {
		t.Fatal(err)
	}
	loose := []byte(`{"schema":{"type":"object"}}`)
	strict := []byte(`{"schema":{"type":"object","properties":{"tiers":{"type":"array","items":{"type":"string"}}}}}`)
	rw := faultproxy.NewRewriter(t, h.srv.URL, func(procedure string, msg proto.Message, request bool) {
		switch m := msg.(type) {
		case *pawlv1.GetReleaseResponse:
			m.GetRelease().GetSpec().ValidatorParams = strict
		case *pawlv1.SessionResponse: // the release inline with its assignment
			for _, rel := range m.GetReleases() {
				rel.GetSpec().ValidatorParams = strict
			}
		}
	})
	// The JSON Schema module starts slowly under -race: a limit of its own.
	h.clientAt(rw.URL, "strict", sdk.WithLabels(map[string]string{"instance": "strict"}), sdk.WithValidatorTimeout(30*time.Second))
	h.waitRegistered("strict")
	tiers := make([]string, 300)
	for i := range tiers {
		tiers[i] = fmt.Sprint(i)
	}
	resp, err := h.rs.CreateRelease(h.ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: &pawlv1.ReleaseSpec{
		ConfigId: "limits", MediaType: "application/json", ValidatorDigest: up.Msg.GetValidator().GetDigest(), ValidatorParams: loose,
		Content:      []byte(`{"tiers":[` + strings.Join(tiers, ",") + `]}`),
		Selector:     map[string]string{"instance": "strict"},
		Stages:       []*pawlv1.Stage{{Name: "everyone", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}}},
		HealthWindow: durationpb.New(100 * time.Millisecond), Deadline: durationpb.New(time.Hour),
	}}))
	if err != nil {
		t.Fatal(err)
	}
	gen := resp.Msg.GetRelease().GetGeneration()
	var rejected *pawlv1.Ack
	h.awaitKV("/_pawl/acks/", func() bool {
		st, err := h.ro.GetRolloutStatus(h.ctx, connect.NewRequest(&pawlv1.GetRolloutStatusRequest{ConfigId: "limits", Generation: gen, AckPageSize: 1000}))
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range st.Msg.GetAcks() {
			if a.GetState() == pawlv1.InstanceState_INSTANCE_STATE_REJECTED {
				rejected = a
			}
		}
		return rejected != nil
	})
	vs := rejected.GetViolations()
	if rejected.GetRejectCode() != pawlv1.RejectCode_REJECT_CODE_INVALID_CONTENT || len(vs) != 256 {
		t.Fatalf("REJECTED with code %s and %d violations (%q); want INVALID_CONTENT and 256", rejected.GetRejectCode(), len(vs), rejected.GetReason())
	}
	if vs[0].GetPath() != "/tiers/0" || !strings.Contains(vs[0].GetMessage(), "string") || vs[0].GetSeverity() != pawlv1.Severity_SEVERITY_ERROR {
		t.Errorf("the first violation is %v", vs[0])
	}
	if last := vs[255].GetMessage(); !strings.HasSuffix(last, "more violations cut (an ACK carries at most 256, 65536 bytes)") {
		t.Errorf("the last violation is %q; want how many were cut", last)
	}
	if !strings.HasPrefix(rejected.GetReason(), "the validator rejected the content:") {
		t.Errorf("the reason is %q", rejected.GetReason())
	}
}
