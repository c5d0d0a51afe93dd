package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/faultproxy"
	"github.com/pawlcfg/pawl/internal/testkit/testclock"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/internal/testkit/wasmbuild"
	"github.com/pawlcfg/pawl/server"
	"github.com/pawlcfg/pawl/validators/host"
)

// TestRolloutFromTheCLI is the user's path: create a release, watch its
// stages as instances ACK, see a zone block it, promote, roll back, and read
// every receipt and ACK afterwards.
func TestRolloutFromTheCLI(t *testing.T) {
	// The health window (the CLI's default minute) passes on this clock.
	clock := testclock.New(time.Now())
	srv := testserver.Start(t, server.WithClock(clock.Now), server.WithInstanceLease(24*time.Hour))
	client := testserver.HTTPClient(t)
	is := pawlv1connect.NewInstanceServiceClient(client, srv.URL, connect.WithGRPC())
	rs := pawlv1connect.NewRolloutServiceClient(client, srv.URL, connect.WithGRPC())
	ctx := context.Background()
	var ids []string
	epochs := map[string]int64{}
	for i := range 6 {
		id := fmt.Sprintf("pay-%d", i)
		ids = append(ids, id)
		resp, err := is.Register(ctx, connect.NewRequest(&pawlv1.RegisterRequest{Instance: &pawlv1.Instance{
			WorkloadIdentity: id, BootId: "b1", Zone: fmt.Sprintf("zone-%c", 'a'+i%3), Role: "worker", TrafficWeight: 1,
		}}))
		if err != nil {
			t.Fatal(err)
		}
		epochs[id] = resp.Msg.GetRecord().GetMembershipEpoch()
	}
	wasm := wasmbuild.Build(t, "routing")
	digest := host.Digest(wasm)
	expect(t, srv, digest+"\n", "validator", "upload", writeFile(t, "routing.wasm", wasm))
	create := func(weight int) {
		t.Helper()
		f := writeFile(t, "r.json", []byte(fmt.Sprintf(`{"upstreams":[{"host":"a","weight":%d},{"host":"b","weight":%d}]}`, weight, 100-weight)))
		if code, out, errOut := pawl(t, srv, "", "release", "create", "routing", "--file", f, "--validator", digest,
			"--stage", "canary:fraction=0.3", "--stage", "zones:zone-quorum=1"); code != 0 {
			t.Fatalf("release create = %d, %q, %q", code, out, errOut)
		}
	}
	var ack func(gen int64, id string, state pawlv1.InstanceState)
	// healthy: the instances that are assigned the release apply it, the
	// health window passes, and they report healthy; then the next ones
	// the rollout reached do the same, until none is left.
	healthy := func(gen int64, ids ...string) {
		t.Helper()
		for len(ids) > 0 {
			var now, later []string
			for _, id := range ids {
				if assigned(t, client, srv.URL, id) == gen {
					now = append(now, id)
				} else {
					later = append(later, id)
				}
			}
			if len(now) == 0 {
				t.Fatalf("none of %v is assigned generation %d", ids, gen)
			}
			for _, id := range now {
				ack(gen, id, pawlv1.InstanceState_INSTANCE_STATE_APPLIED)
			}
			clock.Advance(time.Minute)
			for _, id := range now {
				ack(gen, id, pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED)
			}
			ids = later
		}
	}
	ack = func(gen int64, id string, state pawlv1.InstanceState) {
		t.Helper()
		rel, err := pawlv1connect.NewReleaseServiceClient(client, srv.URL).GetRelease(ctx, connect.NewRequest(&pawlv1.GetReleaseRequest{ConfigId: "routing", Generation: gen}))
		if err != nil {
			t.Fatal(err)
		}
		a := &pawlv1.Ack{
			ConfigId: "routing", Generation: gen, WorkloadIdentity: id, BootId: "b1", ApplySequence: gen, MembershipEpoch: epochs[id],
			ContentDigest: rel.Msg.GetRelease().GetContentDigest(), ValidatorDigest: digest, State: state, HealthOk: true,
			Held:   durationpb.New(time.Minute), // the window, as healthy's clock moved
			Reason: "rejected by local policy", Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		}
		if state == pawlv1.InstanceState_INSTANCE_STATE_REJECTED && id == "pay-0" {
			a.RejectCode = pawlv1.RejectCode_REJECT_CODE_INVALID_CONTENT
			a.Violations = []*pawlv1.Violation{
				{Path: "/upstreams/0/weight", Message: "must be at most 100", Severity: pawlv1.Severity_SEVERITY_ERROR},
				{Message: "weights sum to 120", Severity: pawlv1.Severity_SEVERITY_WARNING},
			}
		}
		if _, err := rs.Ack(ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: a})); err != nil {
			t.Fatal(err)
		}
	}

	create(50)
	// The canary cohort (30%: pay-0 and pay-2) goes first, then the rest;
	// pay-5, in zone c, never ACKs.
	healthy(1, ids[:5]...)
	code, out, _ := pawl(t, srv, "", "rollout", "status", "routing")
	for _, want := range []string{
		"routing generation 1: CANDIDATE (active: generation 0, epoch 0)",
		"coverage: 5 of 6 members reported a digest; 5 run generation 1",
		"stage canary (passed at ",
		"): passed, 2/2 healthy",
		// The zones stage counts the four the canary stage left.
		"stage zones (reached): waiting, 3/4 healthy, 0 rejected: zone \"zone-c\" has 0 of 1 healthy, needs 1",
		"  zone zone-c: 0/1 healthy, 0 rejected (NO_ACK=1)",
		"  states: HEALTHY_ACKED=3 NO_ACK=1",
	} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("rollout status = %d, %q; missing %q", code, out, want)
		}
	}
	code, out, _ = pawl(t, srv, "", "rollout", "status", "routing", "--acks")
	if code != 0 || !regexp.MustCompile(`(?m)^ack pay-0 boot b1 HEALTHY_ACKED seq 1 counted trace 4bf92f3577b34da6a3ce929d0e0e4736 at \S+$`).MatchString(out) {
		t.Fatalf("rollout status --acks = %d, %q", code, out)
	}
	code, _, errOut := pawl(t, srv, "", "promote", "routing", "1")
	if code != 1 || !strings.Contains(errOut, `failed_precondition: rollout: release not ready for promotion: stage "zones" is waiting`) {
		t.Fatalf("promote with a silent zone = %d, %q", code, errOut)
	}
	healthy(1, ids[5])
	code, out, errOut = pawl(t, srv, "", "promote", "routing", "1", "--key", "first", "--actor", "alice")
	if code != 0 || out != "routing promoted: generation 0 -> 1, epoch 0, receipt first by alice\n" {
		t.Fatalf("promote = %d, %q, %q", code, out, errOut)
	}
	// Generation 1 replaced nothing: a rollback says so, not "not ready for promotion".
	if code, _, errOut := pawl(t, srv, "", "rollback", "routing"); code != 1 || !strings.Contains(errOut, "failed_precondition: rollout: cannot roll back: generation 1 replaced no earlier") {
		t.Fatalf("rollback with nowhere to go = %d, %q", code, errOut)
	}
	// The same key again is the same promotion.
	code, out, _ = pawl(t, srv, "", "promote", "routing", "1", "--key", "first")
	if code != 0 || !strings.Contains(out, "receipt first by alice") {
		t.Fatalf("repeated promote = %d, %q", code, out)
	}

	create(70)
	healthy(2, ids...)
	if code, out, errOut := pawl(t, srv, "", "promote", "routing", "2", "--key", "second"); code != 0 {
		t.Fatalf("promote 2 = %d, %q, %q", code, out, errOut)
	}
	ack(2, ids[0], pawlv1.InstanceState_INSTANCE_STATE_REJECTED) // an error spike after the health window
	code, out, errOut = pawl(t, srv, "", "rollback", "routing", "--key", "back", "--actor", "oncall")
	if code != 0 || out != "routing rolled back: generation 2 -> 1, epoch 1, receipt back by oncall\n" {
		t.Fatalf("rollback = %d, %q, %q", code, out, errOut)
	}
	// In text, a receipt reads as promote printed it; -o json gives it whole.
	for key, want := range map[string]string{"first": "routing promoted: generation 0 -> 1, epoch 0, receipt first by alice\n",
		"second": "routing promoted: generation 1 -> 2, ", "back": "routing rolled back: generation 2 -> 1, epoch 1, receipt back by oncall\n"} {
		if code, out, _ := pawl(t, srv, "", "promotion", "routing", key); code != 0 || !strings.HasPrefix(out, want) || strings.Contains(out, "{") {
			t.Fatalf("promotion %s = %d, %q", key, code, out)
		}
	}
	if code, out, _ := pawl(t, srv, "", "promotion", "routing", "back", "-o", "json"); code != 0 || !strings.Contains(out, `"rollback":true`) {
		t.Fatalf("promotion -o json = %d, %q", code, out)
	}
	code, out, _ = pawl(t, srv, "", "rollout", "status", "routing", "--generation", "2")
	// pay-0's rejection counts against the stage that assigned it
	// generation 2: the canary stage or the zones stage, by its cohort.
	if code != 0 || !regexp.MustCompile(`stage (canary|zones) \(passed at [^)]+\): failed, [0-9]+/[0-9]+ healthy, 1 rejected`).MatchString(out) ||
		!strings.Contains(out, "rejected by pay-0 (INVALID_CONTENT): 2 violations\n  error /upstreams/0/weight: must be at most 100\n  warning (document): weights sum to 120\n") {
		t.Fatalf("status of the rolled-back release = %d, %q", code, out)
	}
	// Every ACK of generation 2 is kept: 6 APPLIED, 6 HEALTHY_ACKED, 1 REJECTED.
	code, out, _ = pawl(t, srv, "", "rollout", "status", "routing", "--generation", "2", "-o", "json", "--acks")
	if code != 0 || strings.Count(out, `"workloadIdentity"`) != 13 {
		t.Fatalf("status -o json --acks of generation 2 = %d, %q", code, out)
	}

	// Generation 3 goes to its canary stage and an operator stops it.
	create(90)
	if code, _, errOut := pawl(t, srv, "", "rollout", "stop", "routing", "3"); code != 2 || !strings.Contains(errOut, "--reason is required") {
		t.Fatalf("stop without a reason = %d, %q", code, errOut)
	}
	code, out, errOut = pawl(t, srv, "", "rollout", "stop", "routing", "3", "--reason", "p99 latency up", "--actor", "oncall")
	if code != 0 || out != "routing generation 3 stopped by oncall: p99 latency up\n" {
		t.Fatalf("rollout stop = %d, %q, %q", code, out, errOut)
	}
	code, out, _ = pawl(t, srv, "", "rollout", "status", "routing")
	if code != 0 || !strings.Contains(out, "routing generation 3: STOPPED") || !strings.Contains(out, "stopped by oncall at ") {
		t.Fatalf("status of the stopped release = %d, %q", code, out)
	}
	if code, _, errOut := pawl(t, srv, "", "promote", "routing", "3"); code != 1 || !strings.Contains(errOut, "rollout stopped") {
		t.Fatalf("promote of the stopped release = %d, %q", code, errOut)
	}
	// Every release stays readable, each in the state its records give it.
	code, out, _ = pawl(t, srv, "", "release", "ls", "routing")
	if code != 0 || !strings.Contains(out, "1\tACTIVE\t") || !strings.Contains(out, "2\tROLLED_BACK\t") || !strings.Contains(out, "3\tSTOPPED\t") {
		t.Fatalf("release ls = %d, %q", code, out)
	}
}

// assigned is the generation of config routing that id is assigned now (0:
// none), from the first message of its assignment stream.
func assigned(t *testing.T, client connect.HTTPClient, url, id string) int64 {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := pawlv1connect.NewInstanceServiceClient(client, url, connect.WithGRPC()).WatchAssignments(ctx,
		connect.NewRequest(&pawlv1.WatchAssignmentsRequest{WorkloadIdentity: id}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Receive() {
		t.Fatalf("assignments of %s: %v", id, s.Err())
	}
	for _, a := range s.Msg().GetAssignments() {
		if a.GetConfigId() == "routing" && !a.GetShadow() {
			return a.GetGeneration()
		}
	}
	return 0
}

// TestPromoteResolvesALostResponse: the promotion reaches the server but its
// answer is lost on the way back (a proxy answers 502 instead); the CLI
// looks the receipt up by its key and reports the promotion that happened.
func TestPromoteResolvesALostResponse(t *testing.T) {
	srv := testserver.Start(t)
	front := faultproxy.NewLoser(t, srv.URL)
	front.LoseNext("/Promote", 2) // the first attempt and the retry

	client := testserver.HTTPClient(t)
	is := pawlv1connect.NewInstanceServiceClient(client, srv.URL, connect.WithGRPC())
	ctx := context.Background()
	reg, err := is.Register(ctx, connect.NewRequest(&pawlv1.RegisterRequest{Instance: &pawlv1.Instance{WorkloadIdentity: "pay-0", BootId: "b1", Zone: "zone-a"}}))
	if err != nil {
		t.Fatal(err)
	}
	wasm := wasmbuild.Build(t, "routing")
	digest := host.Digest(wasm)
	expect(t, srv, digest+"\n", "validator", "upload", writeFile(t, "routing.wasm", wasm))
	f := writeFile(t, "r.json", []byte(`{"upstreams":[{"host":"a","weight":100}]}`))
	if code, out, errOut := pawl(t, srv, "", "release", "create", "routing", "--file", f, "--validator", digest,
		"--stage", "all:all", "--health-window", "0s"); code != 0 {
		t.Fatalf("release create = %d, %q, %q", code, out, errOut)
	}
	rel, err := pawlv1connect.NewReleaseServiceClient(client, srv.URL).GetRelease(ctx, connect.NewRequest(&pawlv1.GetReleaseRequest{ConfigId: "routing", Generation: 1}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pawlv1connect.NewRolloutServiceClient(client, srv.URL).Ack(ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: &pawlv1.Ack{
		ConfigId: "routing", Generation: 1, WorkloadIdentity: "pay-0", BootId: "b1", ApplySequence: 1, MembershipEpoch: reg.Msg.GetRecord().GetMembershipEpoch(),
		ContentDigest: rel.Msg.GetRelease().GetContentDigest(), ValidatorDigest: digest, State: pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED, HealthOk: true,
	}})); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := pawl(t, srv, "", "--server", front.URL, "promote", "routing", "1", "--key", "k1", "--actor", "alice")
	if code != 0 || out != "routing promoted: generation 0 -> 1, epoch 0, receipt k1 by alice\n" ||
		!strings.Contains(errOut, "PROMOTION_UNKNOWN") || !strings.Contains(errOut, "the move happened") {
		t.Fatalf("promote with the answer lost = %d, %q, %q", code, out, errOut)
	}
	// A retry with the same key is the same promotion, not a second one.
	code, out, errOut = pawl(t, srv, "", "--server", front.URL, "promote", "routing", "1", "--key", "k1")
	if code != 0 || !strings.Contains(out, "receipt k1 by alice") || front.Lost("/Promote") != 2 {
		t.Fatalf("retried promote = %d, %q, %q (%d answers lost)", code, out, errOut, front.Lost("/Promote"))
	}
}

// TestShadowBudgetsRetireAndAppliedFromTheCLI: a plan with a shadow stage
// and a health budget, written on the command line; a member that never
// comes back is retired; the applied listing and the status show what
// each instance runs, its budget breach and the retirement.
func TestShadowBudgetsRetireAndAppliedFromTheCLI(t *testing.T) {
	srv := testserver.Start(t)
	client := testserver.HTTPClient(t)
	is := pawlv1connect.NewInstanceServiceClient(client, srv.URL, connect.WithGRPC())
	rs := pawlv1connect.NewRolloutServiceClient(client, srv.URL, connect.WithGRPC())
	ctx := context.Background()
	epochs, digest, f := registerAndUpload(t, srv, is, "pay-a", "pay-b", "pay-c")
	// pay-a only validates in shadow, and on a first release runs nothing it
	// could report: half the members are enough coverage.
	if code, out, errOut := pawl(t, srv, "", "release", "create", "routing", "--file", f, "--validator", digest, "--health-window", "0s",
		"--stage", "mirror@zone=zone-a:all:shadow", "--stage", "rest:all:max-error-rate=0.01:max-p99=250ms", "--min-coverage", "0.5"); code != 0 {
		t.Fatalf("release create = %d, %q, %q", code, out, errOut)
	}
	code, out, _ := pawl(t, srv, "", "release", "show", "routing", "1")
	if code != 0 || !strings.Contains(out, `"shadow":true`) || !strings.Contains(out, `"maxErrorRate":0.01`) || !strings.Contains(out, `"maxP99Latency":"0.250s"`) {
		t.Fatalf("release show = %d, %q", code, out)
	}
	var contentDigest string
	if rel, err := pawlv1connect.NewReleaseServiceClient(client, srv.URL).GetRelease(ctx, connect.NewRequest(&pawlv1.GetReleaseRequest{ConfigId: "routing", Generation: 1})); err == nil {
		contentDigest = rel.Msg.GetRelease().GetContentDigest()
	} else {
		t.Fatal(err)
	}
	ack := func(id string, seq int64, state pawlv1.InstanceState, errorRate float64) *pawlv1.Ack {
		t.Helper()
		resp, err := rs.Ack(ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: &pawlv1.Ack{
			ConfigId: "routing", Generation: 1, WorkloadIdentity: id, BootId: "b1", MembershipEpoch: epochs[id], ApplySequence: seq,
			ContentDigest: contentDigest, ValidatorDigest: digest, State: state, HealthOk: true,
			Health: &pawlv1.HealthMeasurement{ErrorRate: errorRate, P99Latency: durationpb.New(100 * time.Millisecond)},
		}}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.GetAck()
	}
	// pay-a validates in the shadow stage; the rest stage is reached, and
	// assigns pay-a the release to apply as well.
	if a := ack("pay-a", 1, pawlv1.InstanceState_INSTANCE_STATE_VALIDATED, 0); !a.GetCounted() {
		t.Fatalf("VALIDATED = %v", a)
	}
	if a := ack("pay-a", 2, pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED, 0.001); !a.GetCounted() {
		t.Fatalf("pay-a healthy once the rest stage assigned it = %v", a)
	}
	if a := ack("pay-b", 1, pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED, 0.001); !a.GetCounted() {
		t.Fatalf("healthy within budget = %v", a)
	}
	// pay-c never comes back: retired, the rest stage passes.
	if code, _, errOut := pawl(t, srv, "", "release", "retire", "routing", "1", "pay-c"); code != 2 || !strings.Contains(errOut, "--reason is required") {
		t.Fatalf("retire without a reason = %d, %q", code, errOut)
	}
	if code, _, errOut := pawl(t, srv, "", "release", "retire", "routing", "1", "pay-z", "--reason", "x"); code != 1 || !strings.Contains(errOut, "not_found") {
		t.Fatalf("retire of a non-member = %d, %q", code, errOut)
	}
	code, out, errOut := pawl(t, srv, "", "release", "retire", "routing", "1", "pay-c", "--reason", "host decommissioned", "--actor", "oncall")
	if code != 0 || out != "pay-c retired from routing generation 1 by oncall: host decommissioned\n" {
		t.Fatalf("retire = %d, %q, %q", code, out, errOut)
	}
	code, out, _ = pawl(t, srv, "", "rollout", "status", "routing")
	for _, want := range []string{
		"stage mirror (shadow, passed at ",
		"stage rest (passed at ",
		", 1 retired): passed, 2/2 healthy",
		"retired pay-c by oncall at ",
		"coverage: 2 of 2 members reported a digest; 2 run generation 1",
	} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("rollout status = %d, %q; missing %q", code, out, want)
		}
	}
	if code, out, errOut := pawl(t, srv, "", "promote", "routing", "1"); code != 0 {
		t.Fatalf("promote = %d, %q, %q", code, out, errOut)
	}
	// After promotion pay-b's error rate jumps past the budget: a
	// rejection, shown with the breach.
	if a := ack("pay-b", 2, pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED, 0.5); !a.GetCounted() || !strings.Contains(a.GetBudgetBreach(), "error rate 0.5 is over the budget of 0.01") {
		t.Fatalf("healthy over budget = %v", a)
	}
	code, out, _ = pawl(t, srv, "", "rollout", "status", "routing")
	if code != 0 || !strings.Contains(out, `over budget: pay-b: stage "rest": error rate 0.5 is over the budget of 0.01`) || !strings.Contains(out, "UNHEALTHY=1") {
		t.Fatalf("status after the breach = %d, %q", code, out)
	}
	code, out, _ = pawl(t, srv, "", "rollout", "applied", "routing")
	if code != 0 || !regexp.MustCompile(`(?m)^pay-b\t1\t`+regexp.QuoteMeta(contentDigest)+`\tmatch\tHEALTHY_ACKED\tb1\tcurrent\t\S+\t-$`).MatchString(out) {
		t.Fatalf("rollout applied = %d, %q", code, out)
	}
}

// TestCoverageGateFromTheCLI: the stage that counts zone-a passes, but
// pay-b has not reported what it runs: status names it, promote is
// refused until it reports, and a lower --min-coverage would have let it
// through.
func TestCoverageGateFromTheCLI(t *testing.T) {
	srv := testserver.Start(t)
	client := testserver.HTTPClient(t)
	is := pawlv1connect.NewInstanceServiceClient(client, srv.URL)
	rs := pawlv1connect.NewRolloutServiceClient(client, srv.URL)
	ctx := context.Background()
	epochs, digest, f := registerAndUpload(t, srv, is, "pay-a", "pay-b")
	if code, _, errOut := pawl(t, srv, "", "release", "create", "routing", "--file", f, "--validator", digest, "--min-coverage", "1.5", "--stage", "a@zone=zone-a:all"); code != 1 ||
		!strings.Contains(errOut, "invalid_argument") || !strings.Contains(errOut, "min coverage 1.5 must be in [0, 1]") {
		t.Fatalf("release create with min coverage 1.5 = %d, %q", code, errOut)
	}
	if code, out, errOut := pawl(t, srv, "", "release", "create", "routing", "--file", f, "--validator", digest, "--health-window", "0s", "--stage", "a@zone=zone-a:all"); code != 0 {
		t.Fatalf("release create = %d, %q, %q", code, out, errOut)
	}
	ack := func(id string, state pawlv1.InstanceState) {
		t.Helper()
		if a := sendAck(t, srv, 1, id, epochs[id], digest, state); id == "pay-a" && !a.GetCounted() {
			t.Fatalf("ACK of pay-a = %v", a)
		}
	}
	ack("pay-a", pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED)
	code, out, _ := pawl(t, srv, "", "rollout", "status", "routing")
	if code != 0 || !strings.Contains(out, "coverage: 1 of 2 members reported a digest; 1 run generation 1; promote needs 2 to have reported (missing: pay-b)") {
		t.Fatalf("rollout status = %d, %q", code, out)
	}
	st, err := rs.GetRolloutStatus(ctx, connect.NewRequest(&pawlv1.GetRolloutStatusRequest{ConfigId: "routing", Generation: 1}))
	if err != nil {
		t.Fatal(err)
	}
	if c := st.Msg.GetCoverage(); c.GetRequired() != 2 || c.GetMissingCount() != 1 || strings.Join(c.GetMissing(), ",") != "pay-b" {
		t.Fatalf("GetRolloutStatus coverage = %v", c)
	}
	if code, _, errOut := pawl(t, srv, "", "promote", "routing", "1"); code != 1 || !strings.Contains(errOut, "failed_precondition") ||
		!strings.Contains(errOut, "1 of 2 members reported what they run, and the release needs 2") || !strings.Contains(errOut, "missing: pay-b") {
		t.Fatalf("promote with pay-b silent = %d, %q", code, errOut)
	}
	// pay-b reports what it runs (an apply its stage-less assignment does
	// not count, but it says what runs there).
	ack("pay-b", pawlv1.InstanceState_INSTANCE_STATE_APPLIED)
	if code, out, errOut := pawl(t, srv, "", "promote", "routing", "1"); code != 0 {
		t.Fatalf("promote once every member reported = %d, %q, %q", code, out, errOut)
	}
}

// sendAck sends id's report of routing generation gen (boot b1, apply
// sequence gen, healthy) and returns the ACK as the server kept it.
func sendAck(t *testing.T, srv *testserver.Server, gen int64, id string, epoch int64, digest string, state pawlv1.InstanceState) *pawlv1.Ack {
	t.Helper()
	ctx := context.Background()
	client := testserver.HTTPClient(t)
	rel, err := pawlv1connect.NewReleaseServiceClient(client, srv.URL).GetRelease(ctx, connect.NewRequest(&pawlv1.GetReleaseRequest{ConfigId: "routing", Generation: gen}))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := pawlv1connect.NewRolloutServiceClient(client, srv.URL).Ack(ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: &pawlv1.Ack{
		ConfigId: "routing", Generation: gen, WorkloadIdentity: id, BootId: "b1", MembershipEpoch: epoch, ApplySequence: gen,
		ContentDigest: rel.Msg.GetRelease().GetContentDigest(), ValidatorDigest: digest, State: state, HealthOk: true,
	}}))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Msg.GetAck()
}

// registerAndUpload registers each instance (boot b1, in the zone its
// name ends in: pay-a in zone-a), uploads the routing validator with the
// CLI, and writes a config it accepts. It returns the instances' epochs,
// the validator's digest and the config file.
func registerAndUpload(t *testing.T, srv *testserver.Server, is pawlv1connect.InstanceServiceClient, ids ...string) (map[string]int64, string, string) {
	t.Helper()
	epochs := map[string]int64{}
	for _, id := range ids {
		resp, err := is.Register(context.Background(), connect.NewRequest(&pawlv1.RegisterRequest{Instance: &pawlv1.Instance{
			WorkloadIdentity: id, BootId: "b1", Zone: "zone-" + id[4:], TrafficWeight: 1,
		}}))
		if err != nil {
			t.Fatal(err)
		}
		epochs[id] = resp.Msg.GetRecord().GetMembershipEpoch()
	}
	wasm := wasmbuild.Build(t, "routing")
	digest := host.Digest(wasm)
	expect(t, srv, digest+"\n", "validator", "upload", writeFile(t, "routing.wasm", wasm))
	return epochs, digest, writeFile(t, "r.json", []byte(`{"upstreams":[{"host":"a","weight":100}]}`))
}
