package openfeature_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"connectrpc.com/connect"
	of "github.com/open-feature/go-sdk/openfeature"
	"github.com/open-feature/go-sdk/openfeature/isolated"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/durationpb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/faultproxy"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/internal/testkit/wasmbuild"
	"github.com/pawlcfg/pawl/sdk"
	"github.com/pawlcfg/pawl/sdk/openfeature"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).reaper"), goleak.Cleanup(func(code int) {
		wasmbuild.Cleanup()
		os.Exit(code)
	}))
}

// fixture is a real pawld on loopback with the routing validator, behind
// a proxy that can cut the SDK client off.
type fixture struct {
	t      *testing.T
	ctx    context.Context
	srv    *testserver.Server
	proxy  *faultproxy.Holder
	rs     pawlv1connect.ReleaseServiceClient
	digest string
}

func newFixture(t *testing.T) *fixture {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	srv := testserver.Start(t)
	f := &fixture{t: t, ctx: ctx, srv: srv, proxy: faultproxy.NewHolder(t, srv.Addr)}
	client := testserver.HTTPClient(t)
	f.rs = pawlv1connect.NewReleaseServiceClient(client, srv.URL)
	resp, err := pawlv1connect.NewValidatorServiceClient(client, srv.URL).Upload(ctx,
		connect.NewRequest(&pawlv1.UploadRequest{Wasm: wasmbuild.Build(t, "routing"), Name: "routing"}))
	if err != nil {
		t.Fatal(err)
	}
	f.digest = resp.Msg.GetValidator().GetDigest()
	return f
}

// client starts an SDK client through the proxy and waits until its
// assignment stream is up (it is then registered).
func (f *fixture) client(id string) *sdk.Client {
	c := f.clientIn(id, f.t.TempDir())
	f.awaitUp(c)
	return c
}

// clientIn starts an SDK client through the proxy with cache directory
// cache, and does not wait for the server.
func (f *fixture) clientIn(id, cache string) *sdk.Client {
	c, err := sdk.New(f.ctx, "http://"+f.proxy.Addr, sdk.WithWorkloadIdentity(id), sdk.WithZone("zone-a"),
		sdk.WithCompiledCacheDir(wasmbuild.CacheDir(f.t)), sdk.WithCacheDir(cache),
		sdk.WithBackoff(10*time.Millisecond, 200*time.Millisecond), sdk.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = c.Close() })
	return c
}

// awaitUp waits until c's assignment stream is up.
func (f *fixture) awaitUp(c *sdk.Client) {
	up := make(chan struct{}, 1)
	stop := c.OnConnection(func(conn sdk.Connection) {
		if conn.Up {
			select {
			case up <- struct{}{}:
			default:
			}
		}
	})
	defer stop()
	if !c.Connection().Up {
		select {
		case <-up:
		case <-f.ctx.Done():
			f.t.Fatal("the client never connected")
		}
	}
}

// release cuts a release of routing with content, one stage for all.
func (f *fixture) release(content string) {
	f.t.Helper()
	if _, err := f.rs.CreateRelease(f.ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: &pawlv1.ReleaseSpec{
		ConfigId: "routing", MediaType: "application/json", ValidatorDigest: f.digest, Content: []byte(content),
		Stages:       []*pawlv1.Stage{{Name: "everyone", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}}},
		HealthWindow: durationpb.New(100 * time.Millisecond), Deadline: durationpb.New(time.Hour),
	}})); err != nil {
		f.t.Fatal(err)
	}
}

func flags(weight int, enabled bool) string {
	return fmt.Sprintf(`{"upstreams":[{"host":"a","weight":%d},{"host":"b","weight":%d}],"enabled":%t,"ratio":0.25,"color":"blue"}`, weight, 100-weight, enabled)
}

// events records every event of an OpenFeature API.
func events(api *of.EvaluationAPI) <-chan of.EventType {
	ch := make(chan of.EventType, 64)
	for _, et := range []of.EventType{of.ProviderReady, of.ProviderStale, of.ProviderError, of.ProviderConfigChange} {
		fn := func(d of.EventDetails) { ch <- et }
		api.AddHandler(et, &fn)
	}
	return ch
}

// await waits for an event of type want, skipping others.
func await(t *testing.T, ch <-chan of.EventType, want of.EventType) {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case got := <-ch:
			if got == want {
				return
			}
		case <-timeout:
			t.Fatalf("no %s event", want)
		}
	}
}

// TestTheProviderEvaluatesFlagsAndFollowsTheClient: through OpenFeature,
// flags of every type read the applied release with STATIC and the
// snapshot as variant; a missing flag and a value of another type give the
// default with their error codes; a new release is a configuration change
// and is read; a partition from the server is STALE with CACHED values,
// and healing it READY again.
func TestTheProviderEvaluatesFlagsAndFollowsTheClient(t *testing.T) {
	f := newFixture(t)
	c := f.client("svc")
	f.release(flags(30, true))

	api := isolated.NewAPI()
	t.Cleanup(func() { _ = api.Shutdown(context.Background()) })
	evs := events(api)
	if err := api.SetProviderAndWait(f.ctx, openfeature.New(c, openfeature.WithConfig("routing"))); err != nil {
		t.Fatal(err)
	}
	await(t, evs, of.ProviderReady)
	client := api.NewClient()
	ctx := f.ctx
	none := of.EvaluationContext{}

	b, err := client.BooleanValueDetails(ctx, "/enabled", false, none)
	if err != nil || !b.Value || b.Reason != of.StaticReason || b.Variant != "routing@1" {
		t.Errorf("/enabled: %+v, %v", b, err)
	}
	if gen, _ := b.FlagMetadata.GetInt("generation"); gen != 1 {
		t.Errorf("flag metadata generation %d", gen)
	}
	if s, err := client.StringValue(ctx, "color", "red", none); err != nil || s != "blue" {
		t.Errorf("color: %q, %v", s, err)
	}
	if n, err := client.IntValue(ctx, "/upstreams/0/weight", 0, none); err != nil || n != 30 {
		t.Errorf("/upstreams/0/weight: %d, %v", n, err)
	}
	if x, err := client.FloatValue(ctx, "/ratio", 0, none); err != nil || x != 0.25 {
		t.Errorf("/ratio: %v, %v", x, err)
	}
	if o, err := client.ObjectValue(ctx, "/upstreams/1", nil, none); err != nil || o.(map[string]any)["host"] != "b" {
		t.Errorf("/upstreams/1: %v, %v", o, err)
	}
	if n, err := client.IntValueDetails(ctx, "/max_amount", 100, none); err == nil || n.Value != 100 || n.ErrorCode != of.FlagNotFoundCode {
		t.Errorf("a missing flag: %+v, %v", n, err)
	}
	if n, err := client.IntValueDetails(ctx, "/ratio", 7, none); err == nil || n.Value != 7 || n.ErrorCode != of.TypeMismatchCode {
		t.Errorf("a fraction read as an int: %+v, %v", n, err)
	}

	// Flag keys that name the config, on a second provider.
	keyed := isolated.NewAPI()
	t.Cleanup(func() { _ = keyed.Shutdown(context.Background()) })
	if err := keyed.SetProviderAndWait(f.ctx, openfeature.New(c)); err != nil {
		t.Fatal(err)
	}
	if n, err := keyed.NewClient().IntValue(ctx, "routing/upstreams/0/weight", 0, none); err != nil || n != 30 {
		t.Errorf("routing/upstreams/0/weight: %d, %v", n, err)
	}
	if n, err := keyed.NewClient().IntValueDetails(ctx, "limits/max_amount", 100, none); err == nil || n.Value != 100 || n.ErrorCode != of.ProviderNotReadyCode {
		t.Errorf("a config never applied: %+v, %v", n, err)
	}

	f.release(flags(80, false))
	await(t, evs, of.ProviderConfigChange)
	if _, err := c.WaitFor(ctx, "routing", func(s *sdk.Snapshot) bool { return s.Generation == 2 }); err != nil {
		t.Fatal(err)
	}
	if b, err := client.BooleanValueDetails(ctx, "/enabled", true, none); err != nil || b.Value || b.Variant != "routing@2" {
		t.Errorf("/enabled after generation 2: %+v, %v", b, err)
	}

	f.proxy.Partition()
	await(t, evs, of.ProviderStale)
	if n, err := client.IntValueDetails(ctx, "/upstreams/0/weight", 0, none); err != nil || n.Value != 80 || n.Reason != of.CachedReason {
		t.Errorf("while partitioned: %+v, %v", n, err)
	}
	f.proxy.Heal()
	await(t, evs, of.ProviderReady)
	if n, err := client.IntValueDetails(ctx, "/upstreams/0/weight", 0, none); err != nil || n.Reason != of.StaticReason {
		t.Errorf("after healing: %+v, %v", n, err)
	}
}

// TestTheProviderFailsInitWithoutTheConfig: a provider waiting for a
// config that is never released fails its init when its init timeout
// passes, and OpenFeature says PROVIDER_ERROR.
func TestTheProviderFailsInitWithoutTheConfig(t *testing.T) {
	f := newFixture(t)
	c := f.client("svc")
	api := isolated.NewAPI()
	t.Cleanup(func() { _ = api.Shutdown(context.Background()) })
	evs := events(api)
	// No deadline on the context: the init timeout bounds the wait.
	provider := openfeature.New(c, openfeature.WithConfig("limits"), openfeature.WithInitTimeout(300*time.Millisecond))
	if err := api.SetProviderAndWait(context.Background(), provider); err == nil {
		t.Fatal("init passed without the config")
	}
	await(t, evs, of.ProviderError)
	if n, err := api.NewClient().IntValueDetails(f.ctx, "/max_amount", 100, of.EvaluationContext{}); err == nil || n.Value != 100 {
		t.Errorf("a flag of a provider in error: %+v, %v", n, err)
	}
}

// TestTheProviderIsStaleOnTheCache: a process that starts while the
// server is unreachable serves the cached release: the provider is READY
// (it has the config), then STALE with CACHED values; once the server
// confirms the release, READY again with STATIC values.
func TestTheProviderIsStaleOnTheCache(t *testing.T) {
	f := newFixture(t)
	cache := t.TempDir()
	first := f.clientIn("svc", cache)
	f.awaitUp(first)
	f.release(flags(40, true))
	if _, err := first.WaitFor(f.ctx, "routing", func(s *sdk.Snapshot) bool { return s.Generation == 1 }); err != nil {
		t.Fatal(err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}

	f.proxy.Partition()
	c := f.clientIn("svc", cache)
	if s := c.Config("routing"); s == nil || !s.FromCache {
		t.Fatalf("the restarted client serves %v, want generation 1 from the cache", s)
	}
	api := isolated.NewAPI()
	t.Cleanup(func() { _ = api.Shutdown(context.Background()) })
	evs := events(api)
	if err := api.SetProviderAndWait(f.ctx, openfeature.New(c, openfeature.WithConfig("routing"))); err != nil {
		t.Fatal(err)
	}
	await(t, evs, of.ProviderStale)
	client := api.NewClient()
	if n, err := client.IntValueDetails(f.ctx, "/upstreams/0/weight", 0, of.EvaluationContext{}); err != nil || n.Value != 40 || n.Reason != of.CachedReason {
		t.Errorf("from the cache: %+v, %v", n, err)
	}
	f.proxy.Heal()
	await(t, evs, of.ProviderReady)
	if _, err := c.WaitFor(f.ctx, "routing", func(s *sdk.Snapshot) bool { return !s.FromCache }); err != nil {
		t.Fatal(err)
	}
	if n, err := client.IntValueDetails(f.ctx, "/upstreams/0/weight", 0, of.EvaluationContext{}); err != nil || n.Value != 40 || n.Reason != of.StaticReason {
		t.Errorf("confirmed by the server: %+v, %v", n, err)
	}
}
