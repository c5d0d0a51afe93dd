package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/internal/testkit/wasmbuild"
	"github.com/pawlcfg/pawl/sdk"
	"github.com/pawlcfg/pawl/validators/host"
)

// designsPlan is the plan the design is built around, as the worked
// example in docs/ROLLOUT.md writes it: every instance downloads and
// validates, then 1% apply, then zone by zone.
var designsPlan = []string{
	"--stage", "validate:all:shadow",
	"--stage", "canary:fraction=0.01",
	"--stage", "zone-a@zone=zone-a:all",
	"--stage", "zone-b@zone=zone-b:all",
	"--stage", "zone-c@zone=zone-c:all",
}

// TestTheDesignsPlanEndToEnd: nine SDK instances in three zones run the
// design's plan, driven from the CLI: every instance validates the release
// in the shadow stage, the one canary applies it, then each zone in turn;
// the release is promoted and rolled back, and every instance follows.
func TestTheDesignsPlanEndToEnd(t *testing.T) {
	srv := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	wasm := wasmbuild.Build(t, "routing")
	digest := host.Digest(wasm)
	expect(t, srv, digest+"\n", "validator", "upload", writeFile(t, "routing.wasm", wasm))
	clients := map[string]*sdk.Client{}
	var ids []string
	for i := range 9 {
		id := fmt.Sprintf("pay-%d", i)
		ids = append(ids, id)
		clients[id] = startInstance(ctx, t, srv, id, fmt.Sprintf("zone-%c", 'a'+i%3))
	}
	awaitSystem(ctx, t, srv, "/_pawl/instances/", func() bool {
		code, out, _ := pawl(t, srv, "", "instances")
		return code == 0 && strings.Count(out, "\tlive\t") == len(ids)
	})
	create := func(weight int, stages ...string) {
		t.Helper()
		f := writeFile(t, "r.json", []byte(fmt.Sprintf(`{"upstreams":[{"host":"a","weight":%d},{"host":"b","weight":%d}]}`, weight, 100-weight)))
		args := append([]string{"release", "create", "routing", "--file", f, "--validator", digest, "--health-window", "0s"}, stages...)
		if code, out, errOut := pawl(t, srv, "", args...); code != 0 {
			t.Fatalf("release create = %d, %q, %q", code, out, errOut)
		}
	}
	runs := func(gen, epoch int64) {
		t.Helper()
		for _, id := range ids {
			if _, err := clients[id].WaitFor(ctx, "routing", func(s *sdk.Snapshot) bool { return s.Generation == gen && s.Epoch == epoch }); err != nil {
				t.Fatalf("%s never ran generation %d at epoch %d: %v (it runs %s)", id, gen, epoch, err, clients[id].Config("routing"))
			}
		}
	}
	passes := func(gen int64) {
		t.Helper()
		awaitSystem(ctx, t, srv, "/_pawl/acks/", func() bool {
			for _, stage := range rolloutStatus(ctx, t, srv, gen).GetStages() {
				if stage.GetOutcome() != "passed" {
					return false
				}
			}
			return true
		})
	}
	create(10, "--stage", "everyone:all")
	runs(1, 0)
	passes(1)
	if code, out, errOut := pawl(t, srv, "", "promote", "routing", "1"); code != 0 {
		t.Fatalf("promote 1 = %d, %q, %q", code, out, errOut)
	}

	create(50, designsPlan...)
	runs(2, 0) // every stage was reached, in turn: the last zone applied it
	passes(2)
	canaries := 0
	for _, id := range ids {
		if clients[id].Config("routing").Stage == "canary" {
			canaries++
		}
	}
	if canaries != 1 {
		t.Fatalf("%d instances applied generation 2 as canaries; 1%% of 9 is one", canaries)
	}
	st := rolloutStatus(ctx, t, srv, 2)
	var passed []time.Time
	for _, stage := range st.GetStages() {
		if stage.GetOutcome() != "passed" || stage.GetPassedAt() == nil {
			t.Fatalf("stage %s: %s (%s)", stage.GetName(), stage.GetOutcome(), stage.GetReason())
		}
		passed = append(passed, stage.GetPassedAt().AsTime())
	}
	if members := st.GetStages()[1].GetMembers(); members != 1 {
		t.Fatalf("the canary stage has %d members; 1%% of 9 is one", members)
	}
	// Each instance validated in the shadow stage, then applied once the
	// stage that takes it was reached: the canary after the shadow stage
	// passed, each zone after the stage before it.
	acks := map[string][]*pawlv1.Ack{}
	for _, a := range st.GetAcks() {
		acks[a.GetWorkloadIdentity()] = append(acks[a.GetWorkloadIdentity()], a)
	}
	shadowSteps := []string{"DISCOVERED", "DOWNLOADED", "VALIDATED"}
	applySteps := []string{"DISCOVERED", "DOWNLOADED", "VALIDATED", "STAGED", "APPLIED", "HEALTHY_ACKED"}
	for _, id := range ids {
		var states []string
		for _, a := range acks[id] {
			if !a.GetCounted() {
				t.Fatalf("%s: %s did not count: %s", id, a.GetState(), a.GetNotCountedReason())
			}
			states = append(states, strings.TrimPrefix(a.GetState().String(), "INSTANCE_STATE_"))
		}
		if want := append(slices.Clone(shadowSteps), applySteps...); !slices.Equal(states, want) {
			t.Fatalf("%s reported %v; want %v", id, states, want)
		}
		stage := stageIndex(t, st, clients[id].Config("routing").Stage) // the stage that assigned it
		if firstApply := acks[id][len(shadowSteps)].GetReceivedAt().AsTime(); firstApply.Before(passed[stage-1]) {
			t.Fatalf("%s (stage %s) started applying at %v, before stage %s passed at %v",
				id, st.GetStages()[stage].GetName(), firstApply, st.GetStages()[stage-1].GetName(), passed[stage-1])
		}
	}
	for i := 1; i < len(passed); i++ {
		if passed[i].Before(passed[i-1]) {
			t.Fatalf("stage %d passed at %v, before stage %d at %v", i, passed[i], i-1, passed[i-1])
		}
	}
	if code, out, errOut := pawl(t, srv, "", "promote", "routing", "2"); code != 0 || !strings.Contains(out, "generation 1 -> 2") {
		t.Fatalf("promote 2 = %d, %q, %q", code, out, errOut)
	}
	if code, out, errOut := pawl(t, srv, "", "rollback", "routing"); code != 0 || !strings.Contains(out, "generation 2 -> 1, epoch 1") {
		t.Fatalf("rollback = %d, %q, %q", code, out, errOut)
	}
	runs(1, 1)
}

// startInstance starts an SDK instance of id in zone against srv, closed
// when the test ends.
func startInstance(ctx context.Context, t *testing.T, srv *testserver.Server, id, zone string) *sdk.Client {
	t.Helper()
	c, err := sdk.New(ctx, srv.URL, sdk.WithWorkloadIdentity(id), sdk.WithZone(zone), sdk.WithAppVersion("2.0.0"),
		sdk.WithCompiledCacheDir(wasmbuild.CacheDir(t)), sdk.WithBackoff(10*time.Millisecond, 200*time.Millisecond),
		sdk.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close %s: %v", id, err)
		}
	})
	return c
}

// awaitSystem checks cond now and after every change under prefix until it
// holds, failing the test when ctx ends.
func awaitSystem(ctx context.Context, t *testing.T, srv *testserver.Server, prefix string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := pawlv1connect.NewKVServiceClient(testserver.HTTPClient(t), srv.URL).Watch(ctx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: prefix}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() {
		t.Fatalf("watch %s: %v", prefix, stream.Err())
	}
	for !cond() {
		if !stream.Receive() {
			t.Fatalf("waiting on %s: %v", prefix, stream.Err())
		}
	}
}

// rolloutStatus reads the status of routing generation gen with every ACK.
func rolloutStatus(ctx context.Context, t *testing.T, srv *testserver.Server, gen int64) *pawlv1.GetRolloutStatusResponse {
	t.Helper()
	resp, err := pawlv1connect.NewRolloutServiceClient(testserver.HTTPClient(t), srv.URL).GetRolloutStatus(ctx,
		connect.NewRequest(&pawlv1.GetRolloutStatusRequest{ConfigId: "routing", Generation: gen, AckPageSize: 1000}))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Msg
}

// stageIndex is the index of the stage named name.
func stageIndex(t *testing.T, st *pawlv1.GetRolloutStatusResponse, name string) int {
	t.Helper()
	for i, stage := range st.GetStages() {
		if stage.GetName() == name {
			return i
		}
	}
	t.Fatalf("no stage %q", name)
	return 0
}
