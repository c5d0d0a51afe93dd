package sdk_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/durationpb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/pawldtest"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/internal/testkit/wasmbuild"
	"github.com/pawlcfg/pawl/sdk"
	"github.com/pawlcfg/pawl/server"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).reaper"), goleak.Cleanup(func(code int) {
		wasmbuild.Cleanup()
		pawldtest.Cleanup()
		os.Exit(code)
	}))
}

// harness is a real pawld on loopback with the routing validator uploaded,
// and operator clients to cut, follow and promote releases.
type harness struct {
	t      testing.TB
	ctx    context.Context
	srv    *testserver.Server
	is     pawlv1connect.InstanceServiceClient
	rs     pawlv1connect.ReleaseServiceClient
	ro     pawlv1connect.RolloutServiceClient
	vs     pawlv1connect.ValidatorServiceClient
	kv     pawlv1connect.KVServiceClient
	digest string // the routing validator's
	// adminToken and instanceToken, with PAWL_TEST_AUTH=1, are the
	// operator's and the SDK clients' credentials.
	adminToken, instanceToken string
}

func newHarness(t testing.TB, opts ...server.Option) *harness {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	h := &harness{t: t, ctx: ctx}
	if os.Getenv("PAWL_TEST_AUTH") == "1" {
		// The SDK's tests again with authentication on: the operator
		// clients hold an admin token, every SDK client an instance token.
		admin, adminHash := testserver.NewToken(t)
		instance, instanceHash := testserver.NewToken(t)
		path := testserver.WriteAuthFile(t, "tokens:\n"+
			"  - principal: operator\n    hash: "+adminHash+"\n    grants: [{role: admin}]\n"+
			"  - principal: fleet\n    hash: "+instanceHash+"\n    grants: [{role: instance, identities: [\"*\"]}, {role: reader, prefixes: [\"/\"]}]\n")
		opts = append([]server.Option{server.WithAuthFile(path)}, opts...)
		h.adminToken, h.instanceToken = admin, instance
	}
	h.connect(testserver.Start(t, opts...))
	h.upload()
	return h
}

// connect points the operator clients at srv.
func (h *harness) connect(srv *testserver.Server) {
	h.srv = srv
	h.connectTo(srv.URL)
}

// connectTo points the operator clients at the server at url.
func (h *harness) connectTo(url string) {
	client := testserver.HTTPClient(h.t)
	if h.adminToken != "" {
		client = testserver.WithBearer(client, h.adminToken)
	}
	h.is = pawlv1connect.NewInstanceServiceClient(client, url)
	h.rs = pawlv1connect.NewReleaseServiceClient(client, url)
	h.ro = pawlv1connect.NewRolloutServiceClient(client, url)
	h.vs = pawlv1connect.NewValidatorServiceClient(client, url)
	h.kv = pawlv1connect.NewKVServiceClient(client, url)
}

// upload uploads the routing validator through the operator clients.
func (h *harness) upload() {
	h.t.Helper()
	resp, err := h.vs.Upload(h.ctx, connect.NewRequest(&pawlv1.UploadRequest{Wasm: wasmbuild.Build(h.t, "routing"), Name: "routing"}))
	if err != nil {
		h.t.Fatal(err)
	}
	h.digest = resp.Msg.GetValidator().GetDigest()
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// client starts an SDK client for instance id against the harness's
// server (or url, when given with WithURL), closed when the test ends.
func (h *harness) client(id string, opts ...sdk.Option) *sdk.Client {
	return h.clientAt(h.srv.URL, id, opts...)
}

func (h *harness) clientAt(url, id string, opts ...sdk.Option) *sdk.Client {
	h.t.Helper()
	base := []sdk.Option{
		sdk.WithWorkloadIdentity(id), sdk.WithZone("zone-a"), sdk.WithAppVersion("2.0.0"),
		sdk.WithCompiledCacheDir(wasmbuild.CacheDir(h.t)), sdk.WithBackoff(10*time.Millisecond, 200*time.Millisecond),
		// The validation limit is wall-clock time, and the Go runtime's
		// start in a validator has taken longer than the 1 s default on
		// two cores shared by every test package under -race: a client
		// that REJECTED a release for it fails a test waiting for
		// HEALTHY_ACKED. The tests of the limit set their own.
		sdk.WithValidatorTimeout(testserver.TestValidatorTimeout),
		sdk.WithLogger(quiet()),
	}
	if h.instanceToken != "" {
		base = append(base, sdk.WithAuthToken(h.instanceToken))
	}
	c, err := sdk.New(h.ctx, url, append(base, opts...)...)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() {
		if err := c.Close(); err != nil {
			h.t.Errorf("close %s: %v", id, err)
		}
	})
	return c
}

// routing renders a valid routing table whose first upstream has weight.
func routing(weight int) []byte {
	return []byte(fmt.Sprintf(`{"upstreams":[{"host":"a","weight":%d},{"host":"b","weight":%d}]}`, weight, 100-weight))
}

// release cuts a release of "routing" with weight, one stage taking
// everyone and a 100 ms health window; edit changes the spec first.
func (h *harness) release(weight int, edit func(*pawlv1.ReleaseSpec)) *pawlv1.Release {
	h.t.Helper()
	spec := &pawlv1.ReleaseSpec{
		ConfigId: "routing", MediaType: "application/json", ValidatorDigest: h.digest, Content: routing(weight),
		Stages:       []*pawlv1.Stage{{Name: "everyone", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}}},
		HealthWindow: durationpb.New(100 * time.Millisecond), Deadline: durationpb.New(time.Hour),
	}
	if edit != nil {
		edit(spec)
	}
	resp, err := h.rs.CreateRelease(h.ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: spec}))
	if err != nil {
		h.t.Fatal(err)
	}
	return resp.Msg.GetRelease()
}

// waitRegistered waits until every id is registered and live, so that a
// release freezes them into its membership.
func (h *harness) waitRegistered(ids ...string) {
	h.t.Helper()
	h.awaitKV("/_pawl/instances/", func() bool {
		resp, err := h.is.ListInstances(h.ctx, connect.NewRequest(&pawlv1.ListInstancesRequest{}))
		if err != nil {
			h.t.Fatal(err)
		}
		live := map[string]bool{}
		for _, r := range resp.Msg.GetInstances() {
			live[r.GetInstance().GetWorkloadIdentity()] = r.GetLive()
		}
		for _, id := range ids {
			if !live[id] {
				return false
			}
		}
		return true
	})
}

// awaitKV checks cond now and after every change under prefix (system
// records included) until it holds, failing the test at the harness's
// deadline.
func (h *harness) awaitKV(prefix string, cond func() bool) {
	h.t.Helper()
	ctx, cancel := context.WithCancel(h.ctx)
	defer cancel()
	stream, err := h.kv.Watch(ctx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: prefix}))
	if err != nil {
		h.t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() {
		h.t.Fatalf("watch %s: %v", prefix, stream.Err())
	}
	for !cond() {
		if !stream.Receive() {
			h.t.Fatalf("waiting on %s: %v", prefix, stream.Err())
		}
	}
}

// status reads the rollout status of routing generation gen, every ACK.
func (h *harness) status(gen int64) *pawlv1.GetRolloutStatusResponse {
	h.t.Helper()
	return h.statusOf("routing", gen)
}

// statusOf is status of another config.
func (h *harness) statusOf(config string, gen int64) *pawlv1.GetRolloutStatusResponse {
	h.t.Helper()
	resp, err := h.ro.GetRolloutStatus(h.ctx, connect.NewRequest(&pawlv1.GetRolloutStatusRequest{ConfigId: config, Generation: gen, AckPageSize: 1000}))
	if err != nil {
		h.t.Fatal(err)
	}
	return resp.Msg
}

// acks returns the states each instance reported for routing generation
// gen, in order, as "id:STATE" strings, and the ACKs themselves.
func (h *harness) acks(gen int64) (map[string][]string, []*pawlv1.Ack) {
	h.t.Helper()
	return h.acksOf("routing", gen)
}

// acksOf is acks of another config.
func (h *harness) acksOf(config string, gen int64) (map[string][]string, []*pawlv1.Ack) {
	h.t.Helper()
	st := h.statusOf(config, gen)
	out := map[string][]string{}
	for _, a := range st.GetAcks() {
		out[a.GetWorkloadIdentity()] = append(out[a.GetWorkloadIdentity()], strings.TrimPrefix(a.GetState().String(), "INSTANCE_STATE_"))
	}
	return out, st.GetAcks()
}

// awaitAcks waits until cond holds for the ACKs of gen, checking after
// every ACK the server stores.
func (h *harness) awaitAcks(gen int64, cond func(states map[string][]string) bool) map[string][]string {
	h.t.Helper()
	var states map[string][]string
	h.awaitKV("/_pawl/acks/", func() bool {
		states, _ = h.acks(gen)
		return cond(states)
	})
	return states
}

// awaitRejected waits until id's last report for gen is REJECTED, and
// returns the states id reported, in order, and that REJECTED ACK.
func (h *harness) awaitRejected(gen int64, id string) ([]string, *pawlv1.Ack) {
	h.t.Helper()
	states := h.awaitAcks(gen, func(s map[string][]string) bool { return reported(s, id, "REJECTED") })
	_, acks := h.acks(gen)
	for i := len(acks) - 1; i >= 0; i-- {
		if acks[i].GetWorkloadIdentity() == id {
			return states[id], acks[i]
		}
	}
	h.t.Fatalf("%s reported REJECTED, and no ACK of it was found", id)
	return nil, nil
}

// awaitBootHealthy waits until boot reported a counted HEALTHY_ACKED for
// gen, and returns every state that boot reported for it, in order.
func (h *harness) awaitBootHealthy(gen int64, boot string) []string {
	h.t.Helper()
	h.awaitKV("/_pawl/acks/", func() bool {
		_, acks := h.acks(gen)
		for _, a := range acks {
			if a.GetBootId() == boot && a.GetState() == pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED && a.GetCounted() {
				return true
			}
		}
		return false
	})
	var states []string
	_, acks := h.acks(gen)
	for _, a := range acks {
		if a.GetBootId() == boot {
			states = append(states, strings.TrimPrefix(a.GetState().String(), "INSTANCE_STATE_"))
		}
	}
	return states
}

// reported says whether id's last report for a generation is state.
func reported(states map[string][]string, id, state string) bool {
	s := states[id]
	return len(s) > 0 && s[len(s)-1] == state
}

// promote promotes routing generation gen over the active one.
func (h *harness) promote(gen int64) {
	h.t.Helper()
	ptr, err := h.ro.GetPointer(h.ctx, connect.NewRequest(&pawlv1.GetPointerRequest{ConfigId: "routing"}))
	if err != nil {
		h.t.Fatal(err)
	}
	p := ptr.Msg.GetPointer()
	if _, err := h.ro.Promote(h.ctx, connect.NewRequest(&pawlv1.PromoteRequest{
		ConfigId: "routing", Generation: gen, ExpectedGeneration: p.GetGeneration(), ExpectedEpoch: p.GetEpoch(),
		IdempotencyKey: fmt.Sprintf("promote-%d", gen),
	})); err != nil {
		h.t.Fatal(err)
	}
}

// has waits until c's applied routing is generation gen.
func has(t testing.TB, c *sdk.Client, gen int64) *sdk.Snapshot {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := c.WaitFor(ctx, "routing", func(s *sdk.Snapshot) bool { return s.Generation == gen })
	if err != nil {
		t.Fatal(err)
	}
	return s
}
