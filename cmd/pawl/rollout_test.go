package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testserver"
	"github.com/pawlcfg/pawl/internal/wasmbuild"
	"github.com/pawlcfg/pawl/validators/host"
)

// TestRolloutFromTheCLI is the user's path: create a release, watch its
// stages as instances ACK, see a zone block it, promote, roll back, and read
// every receipt and ACK afterwards.
func TestRolloutFromTheCLI(t *testing.T) {
	srv := testserver.Start(t)
	client := testserver.HTTPClient(t)
	is := pawlv1connect.NewInstanceServiceClient(client, srv.URL, connect.WithGRPC())
	rs := pawlv1connect.NewRolloutServiceClient(client, srv.URL, connect.WithGRPC())
	ctx := context.Background()
	var ids []string
	for i := range 6 {
		id := fmt.Sprintf("pay-%d", i)
		ids = append(ids, id)
		if _, err := is.Register(ctx, connect.NewRequest(&pawlv1.RegisterRequest{Instance: &pawlv1.Instance{
			WorkloadIdentity: id, BootId: "b1", Zone: fmt.Sprintf("zone-%c", 'a'+i%3), Role: "worker", TrafficWeight: 1,
		}})); err != nil {
			t.Fatal(err)
		}
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
	ack := func(gen int64, id string, state pawlv1.InstanceState) {
		t.Helper()
		rel, err := pawlv1connect.NewReleaseServiceClient(client, srv.URL).GetRelease(ctx, connect.NewRequest(&pawlv1.GetReleaseRequest{ConfigId: "routing", Generation: gen}))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rs.Ack(ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: &pawlv1.Ack{
			ConfigId: "routing", Generation: gen, WorkloadIdentity: id, BootId: "b1", ApplySequence: gen,
			ContentDigest: rel.Msg.GetRelease().GetContentDigest(), ValidatorDigest: digest, State: state, HealthOk: true,
			Reason: "rejected by local policy", Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		}})); err != nil {
			t.Fatal(err)
		}
	}

	create(50)
	for _, id := range ids[:2] { // zones a and b ACK; zone c does not
		ack(1, id, pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED)
	}
	ack(1, ids[3], pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED)
	ack(1, ids[4], pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED)
	code, out, _ := pawl(t, srv, "", "rollout", "status", "routing")
	for _, want := range []string{
		"routing generation 1 (active: generation 0, epoch 0)",
		"stage canary: passed, 4/6 healthy",
		"stage zones: waiting, 4/6 healthy, 0 rejected: [zone \"zone-c\" has 0 of 2 healthy, needs 2]",
		"  zone zone-c: 0/2 healthy, 0 rejected (NO_ACK=2)",
		"  states: HEALTHY_ACKED=4 NO_ACK=2",
	} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("rollout status = %d, %q; missing %q", code, out, want)
		}
	}
	code, _, errOut := pawl(t, srv, "", "promote", "routing", "1")
	if code != 1 || !strings.Contains(errOut, `failed_precondition: rollout: release not ready for promotion: stage "zones" is waiting`) {
		t.Fatalf("promote with a silent zone = %d, %q", code, errOut)
	}
	ack(1, ids[2], pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED)
	ack(1, ids[5], pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED)
	code, out, errOut = pawl(t, srv, "", "promote", "routing", "1", "--key", "first", "--actor", "alice")
	if code != 0 || out != "routing promoted: generation 0 -> 1, epoch 0, receipt first by alice\n" {
		t.Fatalf("promote = %d, %q, %q", code, out, errOut)
	}
	// The same key again is the same promotion.
	code, out, _ = pawl(t, srv, "", "promote", "routing", "1", "--key", "first")
	if code != 0 || !strings.Contains(out, "receipt first by alice") {
		t.Fatalf("repeated promote = %d, %q", code, out)
	}

	create(70)
	for _, id := range ids {
		ack(2, id, pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED)
	}
	if code, out, errOut := pawl(t, srv, "", "promote", "routing", "2", "--key", "second"); code != 0 {
		t.Fatalf("promote 2 = %d, %q, %q", code, out, errOut)
	}
	ack(2, ids[0], pawlv1.InstanceState_INSTANCE_STATE_REJECTED) // an error spike after the health window
	code, out, errOut = pawl(t, srv, "", "rollback", "routing", "--key", "back", "--actor", "oncall")
	if code != 0 || out != "routing rolled back: generation 2 -> 1, epoch 1, receipt back by oncall\n" {
		t.Fatalf("rollback = %d, %q, %q", code, out, errOut)
	}
	for key, want := range map[string]string{"first": `"toGeneration":"1"`, "second": `"toGeneration":"2"`, "back": `"rollback":true`} {
		if code, out, _ := pawl(t, srv, "", "promotion", "routing", key); code != 0 || !strings.Contains(out, want) {
			t.Fatalf("promotion %s = %d, %q", key, code, out)
		}
	}
	code, out, _ = pawl(t, srv, "", "rollout", "status", "routing", "--generation", "2")
	if code != 0 || !strings.Contains(out, "stage zones: failed, 5/6 healthy, 1 rejected") || !strings.Contains(out, "rejected by pay-0: rejected by local policy") {
		t.Fatalf("status of the rolled-back release = %d, %q", code, out)
	}
	// ACKs of generation 1 while 2 was active were late, and are kept.
	code, out, _ = pawl(t, srv, "", "rollout", "status", "routing", "--generation", "2", "-o", "json")
	if code != 0 || strings.Count(out, `"workloadIdentity"`) != 7 {
		t.Fatalf("status -o json of generation 2 = %d, %q", code, out)
	}
	if code, out, _ := pawl(t, srv, "", "release", "ls", "routing"); code != 0 || strings.Count(out, "\n") != 2 {
		t.Fatalf("both releases stay readable: %d, %q", code, out)
	}
}
