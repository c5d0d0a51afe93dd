package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/internal/testkit/wasmbuild"
	"github.com/pawlcfg/pawl/validators/host"
)

func TestReleaseCreateLsShowAndInstances(t *testing.T) {
	srv := testserver.Start(t)
	is := pawlv1connect.NewInstanceServiceClient(testserver.HTTPClient(t), srv.URL)
	for _, id := range []string{"pay-1", "pay-2"} {
		if _, err := is.Register(context.Background(), connect.NewRequest(&pawlv1.RegisterRequest{Instance: &pawlv1.Instance{
			WorkloadIdentity: id, BootId: "b1", Zone: "zone-" + id[4:], Role: "worker", AppVersion: "1.2.0", Labels: map[string]string{"env": "prod"},
		}})); err != nil {
			t.Fatal(err)
		}
	}
	code, out, _ := pawl(t, srv, "", "instances")
	if code != 0 || out != "pay-1\tzone-1\tworker\t1.2.0\tlive\tb1\npay-2\tzone-2\tworker\t1.2.0\tlive\tb1\n" {
		t.Fatalf("instances = %d, %q", code, out)
	}

	wasm := wasmbuild.Build(t, "routing")
	digest := host.Digest(wasm)
	expect(t, srv, digest+"\n", "validator", "upload", writeFile(t, "routing.wasm", wasm))
	good := writeFile(t, "routing.json", []byte(`{"upstreams":[{"host":"a","weight":100}]}`))
	stages := []string{"--stage", "canary:fraction=0.5", "--stage", "zones:zone-quorum=1:max-rejected=1"}

	code, out, errOut := pawl(t, srv, "", append([]string{"release", "create", "payments.routing", "--file", good, "--validator", digest,
		"--selector", "env=prod", "--actor", "alice"}, stages...)...)
	if code != 0 || !strings.HasPrefix(out, "payments.routing generation 1 sha256:") || !strings.HasSuffix(out, " members=2\n") {
		t.Fatalf("release create = %d, %q, %q", code, out, errOut)
	}
	bad := writeFile(t, "bad.json", []byte(`{"upstreams":[{"host":"a","weight":99}]}`))
	code, _, errOut = pawl(t, srv, "", append([]string{"release", "create", "payments.routing", "--file", bad, "--validator", digest}, stages...)...)
	if code != 1 || !strings.Contains(errOut, "\n  error /upstreams: weights sum to 99; they must sum to 100\n") {
		t.Fatalf("release create of a rejected config = %d, %q; want each violation on its own line", code, errOut)
	}
	code, _, errOut = pawl(t, srv, "", "release", "create", "payments.routing", "--file", good, "--validator", digest, "--stage", "canary:sometimes")
	if code != 2 || !strings.Contains(errOut, `kind "sometimes" is not one of`) {
		t.Fatalf("bad --stage = %d, %q", code, errOut)
	}

	code, out, _ = pawl(t, srv, "", "release", "ls", "payments.routing")
	if code != 0 || !strings.HasPrefix(out, "1\tCANDIDATE\tsha256:") || !strings.Contains(out, "\t2\t") || !strings.HasSuffix(out, "\talice\n") {
		t.Fatalf("release ls = %d, %q", code, out)
	}
	code, out, _ = pawl(t, srv, "", "release", "show", "payments.routing", "1")
	if code != 0 || !strings.Contains(out, `"generation":"1"`) || !strings.Contains(out, `"workloadIdentity":"pay-1"`) {
		t.Fatalf("release show = %d, %q", code, out)
	}
	// Registered without an instance credential (this server is open),
	// neither instance may be a member of a release that requires one.
	code, out, errOut = pawl(t, srv, "", append([]string{"release", "create", "payments.routing", "--file", good, "--validator", digest,
		"--selector", "env=prod", "--require-instance-credential"}, stages...)...)
	if code != 0 || !strings.HasPrefix(out, "payments.routing generation 2 ") || !strings.HasSuffix(out, " members=0\n") {
		t.Fatalf("release create --require-instance-credential = %d, %q, %q; want no members", code, out, errOut)
	}
	code, _, errOut = pawl(t, srv, "", "release", "show", "payments.routing", "7")
	if code != 1 || !strings.Contains(errOut, "not_found") {
		t.Fatalf("release show of a missing generation = %d, %q", code, errOut)
	}
}

func TestStageFlagsTakeSelectors(t *testing.T) {
	all := &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}
	for in, want := range map[string]*pawlv1.Stage{
		"canary:fraction=0.05":   {Name: "canary", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_FRACTION, Fraction: 0.05}},
		"zone-a@zone=zone-a:all": {Name: "zone-a", Selector: map[string]string{"zone": "zone-a"}, Policy: all},
		"shadow@shadow=true,role=web:all:max-rejected=1": {Name: "shadow", Selector: map[string]string{"shadow": "true", "role": "web"},
			Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL, MaxRejected: 1}},
		"mirror@zone=zone-a:all:shadow": {Name: "mirror", Selector: map[string]string{"zone": "zone-a"}, Policy: all, Shadow: true},
		"canary:fraction=0.1:max-error-rate=0.01:max-p99=250ms:max-rejected=2": {Name: "canary",
			Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_FRACTION, Fraction: 0.1, MaxRejected: 2},
			Budget: &pawlv1.HealthBudget{MaxErrorRate: new(0.01), MaxP99Latency: durationpb.New(250 * time.Millisecond)}},
	} {
		got, err := parseStage(in)
		if err != nil || !proto.Equal(got, want) {
			t.Errorf("parseStage(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"canary@:all", "canary@zone:all", "@zone=a:all", "c:all:shadow=yes", "c:all:max-p99=soon",
		"c:all:max-error-rate=x", "c:all:bogus", "c:all:max-rejected=x", "c"} {
		if _, err := parseStage(bad); err == nil {
			t.Errorf("parseStage(%q) accepted", bad)
		}
	}
}

// TestReleaseRevokeFromTheCLI: a revoked generation shows as REVOKED and
// promote refuses it; the active generation and a revocation without a
// reason are refused.
func TestReleaseRevokeFromTheCLI(t *testing.T) {
	srv := testserver.Start(t)
	is := pawlv1connect.NewInstanceServiceClient(testserver.HTTPClient(t), srv.URL)
	if _, err := is.Register(context.Background(), connect.NewRequest(&pawlv1.RegisterRequest{Instance: &pawlv1.Instance{
		WorkloadIdentity: "pay-1", BootId: "b1", Zone: "zone-1", TrafficWeight: 1,
	}})); err != nil {
		t.Fatal(err)
	}
	wasm := wasmbuild.Build(t, "routing")
	digest := host.Digest(wasm)
	expect(t, srv, digest+"\n", "validator", "upload", writeFile(t, "routing.wasm", wasm))
	f := writeFile(t, "r.json", []byte(`{"upstreams":[{"host":"a","weight":100}]}`))
	if code, out, errOut := pawl(t, srv, "", "release", "create", "routing", "--file", f, "--validator", digest, "--stage", "all:all"); code != 0 {
		t.Fatalf("release create = %d, %q, %q", code, out, errOut)
	}
	if code, _, errOut := pawl(t, srv, "", "release", "revoke", "routing", "1"); code != 2 || !strings.Contains(errOut, "--reason is required") {
		t.Fatalf("revoke without a reason = %d, %q", code, errOut)
	}
	code, out, errOut := pawl(t, srv, "", "release", "revoke", "routing", "1", "--reason", "leaks a secret", "--actor", "sec")
	if code != 0 || out != "routing generation 1 revoked by sec: leaks a secret\n" {
		t.Fatalf("revoke = %d, %q, %q", code, out, errOut)
	}
	if code, _, errOut := pawl(t, srv, "", "release", "revoke", "routing", "1", "--reason", "again"); code != 1 || !strings.Contains(errOut, "already_exists") {
		t.Fatalf("revoke again = %d, %q", code, errOut)
	}
	if code, out, _ := pawl(t, srv, "", "release", "ls", "routing"); code != 0 || !strings.Contains(out, "\tREVOKED\t") {
		t.Fatalf("release ls = %d, %q", code, out)
	}
	if code, _, errOut := pawl(t, srv, "", "promote", "routing", "1"); code != 1 || !strings.Contains(errOut, "failed_precondition") || !strings.Contains(errOut, "revoked") {
		t.Fatalf("promote of a revoked generation = %d, %q", code, errOut)
	}
}
