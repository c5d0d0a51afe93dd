package console_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/pawldtest"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/internal/testkit/wasmbuild"
)

// chromium is Debian's package's browser, which the browser test drives.
const chromium = "/usr/bin/chromium"

// fleetSize instances register; the first canaries of them form the
// canary stage.
const (
	fleetSize = 300
	canaries  = 30
	config    = "payments.routing"
)

// TestConsoleInChromium: the console in a real headless Chromium against a
// real pawld with an auth file and a rollout under way: without the
// operator's token the server refuses it; with it the page shows the
// rollout, updates when an ACK arrives without a reload, shows the rejected
// instance's reason, pages through the instances, and a Promote click moves
// the pointer (console/e2e.test.mjs drives the browser).
func TestConsoleInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("starts pawld and a browser")
	}
	needJS(t, chromium, filepath.Join(root(t), "node_modules", "playwright-core"))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	token, hash := testserver.NewToken(t)
	authFile := testserver.WriteAuthFile(t, fmt.Sprintf("tokens:\n  - principal: ops\n    hash: %s\n    grants:\n      - role: admin\n", hash))
	p := pawldtest.Start(t, "--auth-file", authFile, "--data-dir", t.TempDir())
	client := testserver.WithBearer(http.DefaultClient, token)
	rs := pawlv1connect.NewRolloutServiceClient(client, p.URL)
	rel, epochs := seed(ctx, t, client, p.URL)

	ack := func(id string, state pawlv1.InstanceState, reason string) {
		t.Helper()
		a := &pawlv1.Ack{
			ConfigId: config, Generation: rel.GetGeneration(), WorkloadIdentity: id, BootId: "boot-1", MembershipEpoch: epochs[id],
			ContentDigest: rel.GetContentDigest(), ValidatorDigest: rel.GetSpec().GetValidatorDigest(), AppArtifact: "routing@1.0.0",
			ApplySequence: 1, State: state, HealthOk: true, Reason: reason,
			Traceparent: fmt.Sprintf("00-%032x-00f067aa0ba902b7-01", len(id)+int(epochs[id])),
		}
		if state == pawlv1.InstanceState_INSTANCE_STATE_REJECTED {
			a.RejectCode = pawlv1.RejectCode_REJECT_CODE_APPLY_FAILED
		}
		resp, err := rs.Ack(ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: a}))
		if err != nil || !resp.Msg.GetAck().GetCounted() {
			t.Fatalf("%s's %s: %v, %v", id, state, resp, err)
		}
	}
	healthy := func(id string) {
		ack(id, pawlv1.InstanceState_INSTANCE_STATE_APPLIED, "")
		ack(id, pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED, "")
	}
	id := func(i int) string { return fmt.Sprintf("inst-%03d", i) }
	for i := range canaries {
		healthy(id(i))
	}
	// The canaries passed: the fleet stage is assigned the release. All
	// but the last two report healthy; one rejects it.
	for i := canaries; i < fleetSize-2; i++ {
		healthy(id(i))
	}
	ack(id(fleetSize-2), pawlv1.InstanceState_INSTANCE_STATE_REJECTED, "upstream b refused the weights")

	cmd := exec.CommandContext(ctx, "node", filepath.Join("console", "e2e.test.mjs"))
	cmd.Dir = root(t)
	shot := filepath.Join(t.TempDir(), "console.png")
	if dir := os.Getenv("PAWL_CONSOLE_SCREENSHOT_DIR"); dir != "" {
		shot = filepath.Join(dir, "console.png")
	}
	cmd.Env = append(os.Environ(), "PAWL_URL="+p.URL, "PAWL_TOKEN="+token, "PAWL_CONFIG="+config, "SCREENSHOT="+shot)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out []string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		out = append(out, sc.Text())
		if sc.Text() == "ACK?" {
			healthy(id(fleetSize - 1)) // the last member reports while the page is open
			if _, err := fmt.Fprintln(stdin, "acked"); err != nil {
				t.Fatal(err)
			}
			_ = stdin.Close()
		}
	}
	if err := cmd.Wait(); err != nil || len(out) == 0 || out[len(out)-1] != "OK" {
		t.Fatalf("node console/e2e.test.mjs: %v\nstdout: %v\nstderr:\n%s", err, out, stderr.String())
	}
	ptr, err := rs.GetPointer(ctx, connect.NewRequest(&pawlv1.GetPointerRequest{ConfigId: config}))
	if err != nil || ptr.Msg.GetPointer().GetGeneration() != rel.GetGeneration() {
		t.Fatalf("after the Promote click the pointer is %v, %v; want generation %d", ptr, err, rel.GetGeneration())
	}
	t.Logf("screenshot: %s", shot)
}

// seed registers the fleet, uploads the routing validator and creates
// generation 1 of the config with a canary and a fleet stage; it returns
// the release and each instance's membership epoch.
func seed(ctx context.Context, t *testing.T, client *http.Client, url string) (*pawlv1.Release, map[string]int64) {
	t.Helper()
	is := pawlv1connect.NewInstanceServiceClient(client, url)
	zones := []string{"zone-a", "zone-b", "zone-c"}
	roles := []string{"primary", "replica"}
	for i := range fleetSize {
		ring := "fleet"
		if i < canaries {
			ring = "canary"
		}
		_, err := is.Register(ctx, connect.NewRequest(&pawlv1.RegisterRequest{Instance: &pawlv1.Instance{
			WorkloadIdentity: fmt.Sprintf("inst-%03d", i), BootId: "boot-1", Zone: zones[i%len(zones)], Role: roles[i%len(roles)],
			TrafficWeight: 1, AppVersion: "1.0.0", Labels: map[string]string{"env": "prod", "ring": ring},
		}}))
		if err != nil {
			t.Fatal(err)
		}
	}
	epochs := map[string]int64{}
	list, err := is.ListInstances(ctx, connect.NewRequest(&pawlv1.ListInstancesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range list.Msg.GetInstances() {
		epochs[rec.GetInstance().GetWorkloadIdentity()] = rec.GetMembershipEpoch()
	}
	vs := pawlv1connect.NewValidatorServiceClient(client, url)
	up, err := vs.Upload(ctx, connect.NewRequest(&pawlv1.UploadRequest{Wasm: wasmbuild.Build(t, "routing"), Name: "routing"}))
	if err != nil {
		t.Fatal(err)
	}
	coverage := 0.5
	rs := pawlv1connect.NewReleaseServiceClient(client, url)
	created, err := rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: &pawlv1.ReleaseSpec{
		ConfigId: config, Content: []byte(`{"upstreams":[{"host":"a","weight":60},{"host":"b","weight":40}]}`), MediaType: "application/json",
		ValidatorDigest: up.Msg.GetValidator().GetDigest(), Selector: map[string]string{"env": "prod"},
		Stages: []*pawlv1.Stage{
			{Name: "canary", Selector: map[string]string{"ring": "canary"}, Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}},
			{Name: "fleet", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ZONE_QUORUM, Fraction: 0.9, MaxRejected: 5}},
		},
		Deadline: durationpb.New(time.Hour), MinCoverage: &coverage,
	}}))
	if err != nil {
		t.Fatal(err)
	}
	return created.Msg.GetRelease(), epochs
}
