package server_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/server"
)

// scrape is one scrape of /metrics: every sample, by its series as the
// text format prints it (name{label="value",...}, labels sorted).
type scrape map[string]float64

// scrapeMetrics GETs /metrics over HTTP and parses the text format.
func scrapeMetrics(t testing.TB, srv *testserver.Server) scrape {
	t.Helper()
	resp, err := testserver.HTTPClient(t).Get(srv.URL + server.MetricsPath)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /metrics: %s: %s", resp.Status, body)
	}
	out := scrape{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// series names a series: its name and label pairs, name=value.
func series(name string, labels ...string) string {
	if len(labels) == 0 {
		return name
	}
	slices.Sort(labels)
	pairs := make([]string, len(labels))
	for i, l := range labels {
		k, v, _ := strings.Cut(l, "=")
		pairs[i] = fmt.Sprintf("%s=%q", k, v)
	}
	return name + "{" + strings.Join(pairs, ",") + "}"
}

// moved checks that each series moved from before to after by exactly
// the given delta.
func moved(t testing.TB, before, after scrape, want map[string]float64) {
	t.Helper()
	for s, delta := range want {
		if got := after[s] - before[s]; got != delta {
			t.Errorf("%s moved by %v (%v -> %v), want %v", s, got, before[s], after[s], delta)
		}
	}
}

// TestMetricsMoveWithTraffic scrapes /metrics from a real server before
// and after known traffic, and checks that each series moved by exactly
// that traffic: RPCs by procedure and code, a watch stream and the
// change it fanned out, writes over a limit (refused by the handler and
// by the guard of request bodies, each counted once), a validator's
// compilation and runs, a rollout's stages, and ACKs by outcome.
func TestMetricsMoveWithTraffic(t *testing.T) {
	const maxValue = 1024
	// Small transactions keep the KV calls' read limit (the largest value
	// or transaction, and slack) small enough to pass.
	srv := testserver.Start(t, server.WithMaxValueBytes(maxValue), server.WithTxnLimits(16, 4096))
	client := testserver.HTTPClient(t)
	kv := newKV(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const (
		putProc      = pawlv1connect.KVServicePutProcedure
		watchProc    = pawlv1connect.KVServiceWatchProcedure
		uploadProc   = pawlv1connect.ValidatorServiceUploadProcedure
		validateProc = pawlv1connect.ValidatorServiceValidateProcedure
	)

	before := scrapeMetrics(t, srv)
	put(t, kv, "/m/a", "1")
	stream, err := kv.Watch(ctx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: "/m/"}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().GetStarted() == nil {
		t.Fatalf("no WatchStarted: %v", stream.Err())
	}
	rev := put(t, kv, "/m/b", "2")
	if !stream.Receive() || len(stream.Msg().GetEvents().GetEvents()) != 1 {
		t.Fatalf("watch: %v, %v", stream.Msg(), stream.Err())
	}
	// A watch from the first revision replays history: not fan-out lag.
	replay, err := kv.Watch(ctx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: "/m/", StartRevision: 1}))
	if err != nil {
		t.Fatal(err)
	}
	for seen := int64(0); seen < rev; {
		if !replay.Receive() {
			t.Fatalf("replay: %v", replay.Err())
		}
		for _, ev := range replay.Msg().GetEvents().GetEvents() {
			seen = ev.GetKv().GetModRevision()
		}
	}
	defer replay.Close()
	// Over --max-value-bytes: the handler refuses it.
	_, err = kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "/m/big", Value: make([]byte, maxValue+1)}))
	if connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("a put over the limit = %v", err)
	}
	// Over what the server reads of a request: the body's guard refuses
	// it before Connect decodes it, for a unary call and for a stream.
	_, err = kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "/m/huge", Value: make([]byte, maxValue+128<<10)}))
	if connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("a put over the body limit = %v", err)
	}
	huge, err := kv.Watch(ctx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: "/" + strings.Repeat("p", maxValue+128<<10)}))
	if err == nil {
		for huge.Receive() {
		}
		err = huge.Err()
		huge.Close()
	}
	if connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("a watch over the body limit = %v", err)
	}
	vs := newValidators(t, srv)
	digest := upload(t, vs, "routing")
	if res, err := validate(vs, digest, `{"upstreams":[{"host":"a","weight":100}]}`); err != nil || !res.GetValid() {
		t.Fatalf("Validate = %v, %v", res, err)
	}
	if res, err := validate(vs, digest, `{"upstreams":[{"host":"a","weight":50}]}`); err != nil || res.GetValid() {
		t.Fatalf("Validate of bad content = %v, %v", res, err)
	}
	during := scrapeMetrics(t, srv)
	moved(t, before, during, map[string]float64{
		series("pawl_rpc_started_total", "procedure="+putProc):                              3,
		series("pawl_rpc_handled_total", "procedure="+putProc, "code=ok"):                   2,
		series("pawl_rpc_handled_total", "procedure="+putProc, "code=resource_exhausted"):   1, // the guard's unary refusal is Connect's alone
		series("pawl_rpc_duration_seconds_count", "procedure="+putProc):                     3,
		series("pawl_rpc_started_total", "procedure="+watchProc):                            3,
		series("pawl_rpc_handled_total", "procedure="+watchProc, "code=resource_exhausted"): 1,
		series("pawl_rpc_streams_open", "procedure="+watchProc):                             2, // the live watch and the replay, both open
		series("pawl_watch_streams"):                                                        2,
		series("pawl_watch_fanout_lag_seconds_count"):                                       1,
		series("pawl_limit_refusals_total", "limit=max-value-bytes"):                        2, // the handler's, and the guard's of the watch
		series("pawl_limit_refusals_total", "limit=max-txn-bytes"):                          1, // the guard's of the put: the larger of the KV limits
		series("pawl_rpc_handled_total", "procedure="+uploadProc, "code=ok"):                1,
		series("pawl_validator_compile_seconds_count", "outcome=ok"):                        1,
		series("pawl_rpc_handled_total", "procedure="+validateProc, "code=ok"):              2,
		series("pawl_validator_run_seconds_count", "outcome=accepted"):                      1,
		series("pawl_validator_run_seconds_count", "outcome=rejected"):                      1,
	})
	if n := during[series("pawl_store_commit_seconds_count", "outcome=ok")] - before[series("pawl_store_commit_seconds_count", "outcome=ok")]; n < 2 {
		t.Errorf("store commits moved by %v, want at least the 2 puts", n)
	}
	if got := during[series("pawl_store_revision")]; got < float64(rev) {
		t.Errorf("pawl_store_revision = %v, want at least %d", got, rev)
	}
	if during[series("pawl_store_size_bytes")] <= 0 || during[series("pawl_store_quota_bytes")] != server.DefaultQuotaBytes ||
		during[series("pawl_store_nospace_alarm")] != 0 {
		t.Errorf("store size %v, quota %v, alarm %v", during[series("pawl_store_size_bytes")], during[series("pawl_store_quota_bytes")],
			during[series("pawl_store_nospace_alarm")])
	}
	if during[series("pawl_connections_open")] < 1 {
		t.Errorf("pawl_connections_open = %v", during[series("pawl_connections_open")])
	}
	stream.Close()

	// A rollout of two stages: the first waits for ACKs, the second for
	// the first. Then ACKs: one that counts, one the server refuses.
	is := pawlv1connect.NewInstanceServiceClient(client, srv.URL, connect.WithGRPC())
	rs := pawlv1connect.NewReleaseServiceClient(client, srv.URL, connect.WithGRPC())
	ro := pawlv1connect.NewRolloutServiceClient(client, srv.URL, connect.WithGRPC())
	register(t, is, "pay-1", "boot-a", "zone-a", map[string]string{"env": "prod"})
	register(t, is, "pay-2", "boot-a", "zone-b", map[string]string{"env": "prod"})
	created, err := rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: releaseSpec(digest, `{"upstreams":[{"host":"a","weight":100}]}`)}))
	if err != nil {
		t.Fatal(err)
	}
	rel := created.Msg.GetRelease()
	ack := &pawlv1.Ack{ConfigId: rel.GetSpec().GetConfigId(), Generation: rel.GetGeneration(), BootId: "boot-a", ContentDigest: rel.GetContentDigest(), ValidatorDigest: digest,
		ApplySequence: 1, State: pawlv1.InstanceState_INSTANCE_STATE_VALIDATED}
	// One member is the canary's, whose ACK counts; the other's stage is
	// not reached, and its ACK is kept without counting.
	counted := 0
	for _, id := range []string{"pay-1", "pay-2"} {
		ack.WorkloadIdentity, ack.MembershipEpoch = id, epochOf(t, is, id)
		resp, err := ro.Ack(ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: ack}))
		if err != nil {
			t.Fatalf("Ack(%s): %v", id, err)
		}
		if resp.Msg.GetAck().GetCounted() {
			counted++
		}
	}
	if counted != 1 {
		t.Fatalf("%d ACKs counted, want the canary's", counted)
	}
	ack.Generation = 99
	if _, err := ro.Ack(ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: ack})); err == nil {
		t.Fatal("an ACK of a release that does not exist was taken")
	}
	// A state outside the enum gets no label of its own.
	ack.Generation, ack.State = rel.GetGeneration(), pawlv1.InstanceState(1234)
	if _, err := ro.Ack(ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: ack})); err == nil {
		t.Fatal("an ACK of state 1234 was taken")
	}
	// Status waits until the rollout views have every write before it.
	if _, err := ro.GetRolloutStatus(ctx, connect.NewRequest(&pawlv1.GetRolloutStatusRequest{ConfigId: rel.GetSpec().GetConfigId(), Generation: rel.GetGeneration()})); err != nil {
		t.Fatal(err)
	}
	after := scrapeMetrics(t, srv)
	moved(t, during, after, map[string]float64{
		series("pawl_acks_total", "state=VALIDATED", "outcome=counted"):     1,
		series("pawl_acks_total", "state=VALIDATED", "outcome=not_counted"): 1,
		series("pawl_acks_total", "state=VALIDATED", "outcome=refused"):     1,
		series("pawl_validator_run_seconds_count", "outcome=accepted"):      1, // the release's content, checked at creation
	})
	// Each ACK recorded went through a batch (one transaction each here:
	// they were sent one after the other).
	if n := after[series("pawl_ack_batch_size_count")] - during[series("pawl_ack_batch_size_count")]; n < 1 {
		t.Errorf("pawl_ack_batch_size counted %v store transactions of ACKs, want at least 1", n)
	}
	for s := range after {
		if strings.Contains(s, "1234") {
			t.Errorf("series %s: a client's number became a label", s)
		}
	}
	for state, want := range map[string]float64{"waiting": 1, "pending": 1, "passed": 0, "failed": 0, "stopped": 0} {
		if got := after[series("pawl_rollout_stages", "state="+state)]; got != want {
			t.Errorf("rollout stages %s = %v, want %v", state, got, want)
		}
	}
}

// TestNoSpaceAlarmIsAGauge: puts into a small quota until one is refused;
// the refusal is counted by its limit, and the NOSPACE alarm it raised
// reads 1, with the size near the quota.
func TestNoSpaceAlarmIsAGauge(t *testing.T) {
	// Large enough that a put costs less than a tenth of it: a put refused
	// under nine tenths is refused alone, without the alarm.
	const quota = 256 << 10
	srv := testserver.Start(t, server.WithQuota(quota))
	kv := newKV(t, srv)
	before := scrapeMetrics(t, srv)
	if before[series("pawl_store_nospace_alarm")] != 0 || before[series("pawl_store_quota_bytes")] != quota {
		t.Fatalf("before: alarm %v, quota %v", before[series("pawl_store_nospace_alarm")], before[series("pawl_store_quota_bytes")])
	}
	value := make([]byte, 1000)
	refused := false
	for i := 0; i < 1000 && !refused; i++ {
		_, err := kv.Put(context.Background(), connect.NewRequest(&pawlv1.PutRequest{Key: fmt.Sprintf("/fill/%d", i), Value: value}))
		switch {
		case connect.CodeOf(err) == connect.CodeResourceExhausted:
			refused = true
		case err != nil:
			t.Fatalf("put %d: %v", i, err)
		}
	}
	if !refused {
		t.Fatalf("1000 puts of %d bytes fit in a quota of %d bytes", len(value), quota)
	}
	after := scrapeMetrics(t, srv)
	moved(t, before, after, map[string]float64{
		series("pawl_limit_refusals_total", "limit=quota-bytes"):                                                      1,
		series("pawl_store_nospace_alarm"):                                                                            1,
		series("pawl_store_commit_seconds_count", "outcome=error"):                                                    1,
		series("pawl_rpc_handled_total", "procedure="+pawlv1connect.KVServicePutProcedure, "code=resource_exhausted"): 1,
	})
	if used := after[series("pawl_store_size_bytes")]; used < quota*9/10 {
		t.Errorf("size %v with the alarm raised; want at least nine tenths of %d", used, quota)
	}
}
