package sdk_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/internal/testkit/wasmbuild"
)

// TestValidatorsInEveryLanguageReachOneVerdict uploads the routing example
// built from Go, Rust and AssemblyScript to a real pawld. On every input
// of validators/examples/parity/testdata the server's verdict with each
// port (a dry run, and CreateRelease's refusal with its violations)
// equals its verdict with the Go module; and a release of a valid table
// with each port reaches an SDK instance, which validates it with the
// same module (its ACKs name the port's digest) and reaches the same
// verdict: valid, applied, healthy.
func TestValidatorsInEveryLanguageReachOneVerdict(t *testing.T) {
	h := newHarness(t)
	ports := map[string][]byte{
		"rust":           wasmbuild.BuildRust(t, "routing-rust"),
		"assemblyscript": wasmbuild.BuildAssemblyScript(t, "routing-as"),
	}
	digests := map[string]string{"go": h.digest}
	for lang, wasm := range ports {
		up, err := h.vs.Upload(h.ctx, connect.NewRequest(&pawlv1.UploadRequest{Wasm: wasm, Name: "routing-" + lang}))
		if err != nil {
			t.Fatalf("upload %s: %v", lang, err)
		}
		digests[lang] = up.Msg.GetValidator().GetDigest()
	}
	files, err := filepath.Glob(filepath.Join(wasmbuild.Examples(), "parity", "testdata", "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no inputs: %v", err)
	}
	spec := func(config, digest string, content []byte) *pawlv1.ReleaseSpec {
		return &pawlv1.ReleaseSpec{
			ConfigId: config, MediaType: "application/json", ValidatorDigest: digest, Content: content,
			Stages:       []*pawlv1.Stage{{Name: "everyone", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}}},
			HealthWindow: durationpb.New(100 * time.Millisecond), Deadline: durationpb.New(time.Hour),
		}
	}
	// refusal is CreateRelease's verdict: nil when it created the release
	// (which it then leaves a candidate nobody follows), else the
	// violations, or the error of content the server refuses before any
	// validator sees it (not JSON).
	refusal := func(digest string, content []byte) []string {
		_, err := h.rs.CreateRelease(h.ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: spec("dry-"+digest[7:19], digest, content)}))
		if err == nil {
			return nil
		}
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument {
			t.Fatalf("CreateRelease: %v; want InvalidArgument", err)
		}
		if len(ce.Details()) == 0 {
			return []string{ce.Message()}
		}
		d, err := ce.Details()[0].Value()
		rejected, ok := d.(*pawlv1.ReleaseRejected)
		if err != nil || !ok {
			t.Fatalf("CreateRelease's detail is %v, %v", d, err)
		}
		return violations(rejected.GetViolations())
	}
	var valid []byte
	for _, f := range files {
		content, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		want, err := h.vs.Validate(h.ctx, connect.NewRequest(&pawlv1.ValidateRequest{Digest: digests["go"], Content: content, MediaType: "application/json"}))
		if err != nil {
			t.Fatalf("%s: go: %v", f, err)
		}
		if want.Msg.GetValid() && valid == nil {
			valid = content
		}
		wantRefusal := refusal(digests["go"], content)
		if want.Msg.GetValid() != (wantRefusal == nil) {
			t.Fatalf("%s: the Go module's dry run says valid=%t, CreateRelease refused with %v", f, want.Msg.GetValid(), wantRefusal)
		}
		for lang := range ports {
			got, err := h.vs.Validate(h.ctx, connect.NewRequest(&pawlv1.ValidateRequest{Digest: digests[lang], Content: content, MediaType: "application/json"}))
			if err != nil {
				t.Fatalf("%s: %s: %v", f, lang, err)
			}
			if got.Msg.GetValid() != want.Msg.GetValid() || !reflect.DeepEqual(violations(got.Msg.GetViolations()), violations(want.Msg.GetViolations())) {
				t.Errorf("%s: %s's dry run gives %v; go's %v", filepath.Base(f), lang, got.Msg, want.Msg)
			}
			if r := refusal(digests[lang], content); !reflect.DeepEqual(r, wantRefusal) {
				t.Errorf("%s: CreateRelease with %s refused with %v; with go %v", filepath.Base(f), lang, r, wantRefusal)
			}
		}
	}
	if valid == nil {
		t.Fatal("no input is valid")
	}

	// The SDK's verdict: each port's release is validated on the instance
	// with that port's module, applied and healthy.
	c := h.client("langs-1")
	h.waitRegistered("langs-1")
	for lang := range ports {
		config := "routing-" + lang
		resp, err := h.rs.CreateRelease(h.ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: spec(config, digests[lang], valid)}))
		if err != nil {
			t.Fatalf("release with %s: %v", lang, err)
		}
		gen := resp.Msg.GetRelease().GetGeneration()
		var healthy *pawlv1.Ack
		h.awaitKV("/_pawl/acks/", func() bool {
			st, err := h.ro.GetRolloutStatus(h.ctx, connect.NewRequest(&pawlv1.GetRolloutStatusRequest{ConfigId: config, Generation: gen, AckPageSize: 1000}))
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range st.Msg.GetAcks() {
				switch a.GetState() {
				case pawlv1.InstanceState_INSTANCE_STATE_REJECTED:
					t.Fatalf("the instance rejected the release validated by %s: %s", lang, a.GetReason())
				case pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED:
					healthy = a
				}
			}
			return healthy != nil
		})
		if healthy.GetValidatorDigest() != digests[lang] {
			t.Errorf("%s: the instance validated with %s; want %s", lang, healthy.GetValidatorDigest(), digests[lang])
		}
		if s := c.Config(config); s == nil || string(s.Content) != string(valid) {
			t.Errorf("%s: the instance serves %v; want the released content", lang, s)
		}
	}
}

// violations renders violations for comparison.
func violations(vs []*pawlv1.Violation) []string {
	out := []string{}
	for _, v := range vs {
		out = append(out, v.GetPath()+" "+v.GetSeverity().String()+" "+v.GetMessage())
	}
	return out
}
