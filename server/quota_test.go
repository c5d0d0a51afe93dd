package server_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/internal/testkit/wasmbuild"
	"github.com/pawlcfg/pawl/sdk/pawlerr"
	"github.com/pawlcfg/pawl/server"
)

// alarmLog is a slog handler that hands on the messages about the NOSPACE
// alarm, so that a test awaits the log line rather than polling for it.
type alarmLog struct{ msgs chan string }

func (h alarmLog) Enabled(context.Context, slog.Level) bool { return true }
func (h alarmLog) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "NOSPACE") {
		select {
		case h.msgs <- r.Message:
		default:
		}
	}
	return nil
}
func (h alarmLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h alarmLog) WithGroup(string) slog.Handler      { return h }

func (h alarmLog) await(t *testing.T, want string) {
	t.Helper()
	select {
	case msg := <-h.msgs:
		if !strings.Contains(msg, want) {
			t.Fatalf("the server logged %q; want %q", msg, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the server never logged %q", want)
	}
}

func storeStatus(t *testing.T, ms pawlv1connect.MaintenanceServiceClient) *pawlv1.StatusResponse {
	t.Helper()
	resp, err := ms.Status(context.Background(), connect.NewRequest(&pawlv1.StatusRequest{}))
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	return resp.Msg
}

// wantQuotaRefusal checks that err is ResourceExhausted naming the quota
// and its flag.
func wantQuotaRefusal(t *testing.T, what string, err error, quota int64) {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeResourceExhausted ||
		!strings.Contains(ce.Message(), "--quota-bytes") || !strings.Contains(ce.Message(), fmt.Sprint(quota)) {
		t.Fatalf("%s over the quota: %v; want RESOURCE_EXHAUSTED naming the %d-byte quota and --quota-bytes", what, err, quota)
	}
	// The detail says the same to a program: the quota, or the quota and
	// its reserve for reports, and where the store is or would be.
	l, ok := pawlerr.LimitFrom(err)
	if !ok || l.GetLimit() != "--quota-bytes" || l.GetUnit() != "bytes" ||
		(l.GetLimitValue() != uint64(quota) && l.GetLimitValue() != uint64(quota+quota/10)) || l.GetValue() < uint64(quota)*9/10 {
		t.Fatalf("%s over the quota: detail %v; want LimitExceeded{--quota-bytes} of the %d-byte quota", what, l, quota)
	}
}

// TestStorageQuota: a server restarted with a small quota over a store
// that holds a release is filled by puts. Then puts, transactions,
// releases and validator uploads are refused with ResourceExhausted
// naming the quota and its flag; Get, List and Watch work; ACKs and
// registrations still land (the reserve); the NOSPACE alarm is in Status
// and in the log. Deletes work, and after compaction the alarm clears by
// itself, is logged as cleared, and puts work again.
func TestStorageQuota(t *testing.T) {
	began := time.Now()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	first := testserver.StartIn(t, dir)
	c := newCanaryRollout(t, ctx, first)
	register(t, c.is, "c1", "b", "zone-a", map[string]string{"canary": "true"})
	register(t, c.is, "w1", "b", "zone-a", nil)
	rel := c.create(50)
	size := storeStatus(t, pawlv1connect.NewMaintenanceServiceClient(testserver.HTTPClient(t), first.URL)).GetSizeBytes()
	first.Stop()
	t.Logf("set up in %s; the store holds %d bytes", time.Since(began), size)

	// Room for puts besides the validator module, and under nine tenths
	// of the quota to start with (or the alarm is raised at once).
	quota := 2*size + 256<<10
	log := alarmLog{msgs: make(chan string, 4)}
	srv := testserver.StartIn(t, dir, server.WithQuota(quota), server.WithQuotaCheck(20*time.Millisecond),
		server.WithLogger(slog.New(log)), server.WithRetention(1, 0), server.WithLogRetention(1))
	client := testserver.HTTPClient(t)
	c.is = pawlv1connect.NewInstanceServiceClient(client, srv.URL, connect.WithGRPC())
	c.rs = pawlv1connect.NewReleaseServiceClient(client, srv.URL, connect.WithGRPC())
	c.ro = pawlv1connect.NewRolloutServiceClient(client, srv.URL)
	kv := newKV(t, srv)
	ms := pawlv1connect.NewMaintenanceServiceClient(client, srv.URL)

	value := []byte(strings.Repeat("q", 4<<10))
	var filled []string
	for i := 0; ; i++ {
		key := fmt.Sprintf("/fill/%05d", i)
		_, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: key, Value: value}))
		if err != nil {
			wantQuotaRefusal(t, "a put", err, quota)
			break
		}
		filled = append(filled, key)
		if i > 10_000 {
			t.Fatalf("%d puts and no refusal: %v", i, storeStatus(t, ms))
		}
	}
	if len(filled) == 0 {
		t.Fatal("the first put was refused: the quota left no room")
	}
	st := storeStatus(t, ms)
	t.Logf("%d puts filled it, by %s", len(filled), time.Since(began))
	if st.GetQuotaBytes() != quota || st.GetQuotaReserveBytes() != quota/10 || st.GetSizeBytes() < quota-quota/10 ||
		len(st.GetAlarms()) != 1 || st.GetAlarms()[0].GetKind() != pawlv1.AlarmKind_ALARM_KIND_NOSPACE ||
		st.GetAlarms()[0].GetSince() == nil || !strings.Contains(st.GetAlarms()[0].GetMessage(), "--quota-bytes") {
		t.Fatalf("status after the refusal: %v; want the NOSPACE alarm with the size and the %d-byte quota", st, quota)
	}
	log.await(t, "NOSPACE alarm: the store reached its storage quota")
	if u, err := srv.Server.StorageUsage(ctx); err != nil || !u.NoSpace || u.QuotaBytes != quota || u.UsedBytes != st.GetSizeBytes() {
		t.Fatalf("StorageUsage = %+v, %v; want the alarm and the size Status reported", u, err)
	}

	// Every write that adds bytes is refused, and changes nothing.
	_, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "/small", Value: []byte("x")}))
	wantQuotaRefusal(t, "a small put under the alarm", err, quota)
	_, err = kv.Txn(ctx, connect.NewRequest(&pawlv1.TxnRequest{Ops: []*pawlv1.TxnOp{{Key: "/t", Value: []byte("x")}}}))
	wantQuotaRefusal(t, "a transaction", err, quota)
	_, err = c.rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: &pawlv1.ReleaseSpec{
		ConfigId: "routing", MediaType: "application/json", ValidatorDigest: c.digest,
		Content:  []byte(`{"upstreams":[{"host":"a","weight":60},{"host":"b","weight":40}]}`),
		Stages:   []*pawlv1.Stage{{Name: "everyone", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}}},
		Deadline: durationpb.New(time.Hour),
	}}))
	wantQuotaRefusal(t, "a release", err, quota)
	_, err = newValidators(t, srv).Upload(ctx, connect.NewRequest(&pawlv1.UploadRequest{Wasm: wasmbuild.Build(t, "jsonschema"), Name: "jsonschema"}))
	wantQuotaRefusal(t, "a validator upload", err, quota)
	if rev := currentRevision(t, kv); rev != st.GetRevision() {
		t.Fatalf("the refused writes moved the revision from %d to %d", st.GetRevision(), rev)
	}

	// Reads and watches work.
	if resp, err := kv.Get(ctx, connect.NewRequest(&pawlv1.GetRequest{Key: filled[0]})); err != nil || len(resp.Msg.GetKv().GetValue()) != len(value) {
		t.Fatalf("Get under the alarm: %v", err)
	}
	if resp, err := kv.List(ctx, connect.NewRequest(&pawlv1.ListRequest{Prefix: "/fill/", PageSize: 1000})); err != nil || len(resp.Msg.GetKvs()) != len(filled) {
		t.Fatalf("List under the alarm: %v", err)
	}
	w := openWatch(t, kv, "/fill/", 0)

	// A fleet's ACKs and registrations use the reserve.
	if ack := c.ack(rel, "c1"); !ack.GetCounted() {
		t.Fatalf("an ACK under the alarm was stored but not counted: %v", ack)
	}
	register(t, c.is, "w2", "b", "zone-a", nil)

	// Deletes work, although each appends to the change log; the
	// watcher sees them.
	for _, key := range filled {
		if _, err := kv.Delete(ctx, connect.NewRequest(&pawlv1.DeleteRequest{Key: key})); err != nil {
			t.Fatalf("Delete(%s) under the alarm: %v", key, err)
		}
	}
	if evs := w.events(t, len(filled)); evs[len(evs)-1].GetType() != pawlv1.EventType_EVENT_TYPE_DELETE {
		t.Fatalf("the watcher saw %v", evs[len(evs)-1])
	}
	if _, err := srv.Server.ApplyRetention(ctx); err != nil {
		t.Fatalf("compaction under the alarm: %v", err)
	}
	st = storeStatus(t, ms)
	if len(st.GetAlarms()) != 0 || st.GetSizeBytes() >= quota-quota/10 {
		t.Fatalf("status after deletes and compaction: %v; want no alarm, under nine tenths of the %d-byte quota", st, quota)
	}
	log.await(t, "NOSPACE alarm cleared")
	put(t, kv, "/again", "x")
}
