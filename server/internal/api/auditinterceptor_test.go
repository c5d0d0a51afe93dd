package api_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/sdk/auditchain"
	"github.com/pawlcfg/pawl/server/internal/api"
	"github.com/pawlcfg/pawl/server/internal/audit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// refusing is a KV service that refuses reads, unary and streaming, as an
// authorizer does: the refusals are what the audit interceptor must see.
type refusing struct {
	pawlv1connect.UnimplementedKVServiceHandler
}

func (refusing) Get(context.Context, *connect.Request[pawlv1.GetRequest]) (*connect.Response[pawlv1.GetResponse], error) {
	return nil, connect.NewError(connect.CodePermissionDenied, errors.New("reader of /app/ needed"))
}

func (refusing) List(context.Context, *connect.Request[pawlv1.ListRequest]) (*connect.Response[pawlv1.ListResponse], error) {
	return connect.NewResponse(&pawlv1.ListResponse{}), nil
}

func (refusing) Watch(context.Context, *connect.Request[pawlv1.WatchRequest], *connect.ServerStream[pawlv1.WatchResponse]) error {
	return connect.NewError(connect.CodeUnauthenticated, errors.New("no token"))
}

// TestRefusalsOfReadsAreAudited: a read refused, unary or streaming, is
// recorded with its principal, code, trace ID and subject, and its answer
// carries the request ID; a read that succeeds is not recorded.
func TestRefusalsOfReadsAreAudited(t *testing.T) {
	log, err := audit.OpenFile(filepath.Join(t.TempDir(), audit.FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	interceptor := api.AuditInterceptor(log, api.HeaderActor, time.Now, quiet)
	mux := http.NewServeMux()
	mux.Handle(pawlv1connect.NewKVServiceHandler(refusing{}, connect.WithInterceptors(interceptor)))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	kv := pawlv1connect.NewKVServiceClient(srv.Client(), srv.URL)
	ctx := context.Background()
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

	get := connect.NewRequest(&pawlv1.GetRequest{Key: "/app/secret"})
	get.Header().Set(api.ActorHeader, "mallory")
	get.Header().Set("traceparent", traceparent)
	_, err = kv.Get(ctx, get)
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodePermissionDenied {
		t.Fatalf("Get = %v", err)
	}
	getID := ce.Meta().Get(api.RequestIDHeader)
	if _, err := kv.List(ctx, connect.NewRequest(&pawlv1.ListRequest{Prefix: "/app/"})); err != nil {
		t.Fatal(err)
	}
	watch := connect.NewRequest(&pawlv1.WatchRequest{Prefix: "/app/"})
	watch.Header().Set(api.ActorHeader, "mallory")
	stream, err := kv.Watch(ctx, watch)
	if err != nil {
		t.Fatal(err)
	}
	for stream.Receive() {
	}
	if connect.CodeOf(stream.Err()) != connect.CodeUnauthenticated {
		t.Fatalf("Watch = %v", stream.Err())
	}
	watchID := stream.ResponseHeader().Get(api.RequestIDHeader)
	_ = stream.Close()

	entries, err := log.Read(ctx, audit.Cursor{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Fatalf("%d records, want the two refusals", len(entries))
	}
	for i, want := range []auditchain.Record{
		{Principal: "mallory", Procedure: pawlv1connect.KVServiceGetProcedure, RequestID: getID, TraceID: "4bf92f3577b34da6a3ce929d0e0e4736",
			Outcome: "permission_denied", Message: "reader of /app/ needed", Subject: auditchain.Subject{Key: "/app/secret"}},
		{Principal: "mallory", Procedure: pawlv1connect.KVServiceWatchProcedure, RequestID: watchID,
			Outcome: "unauthenticated", Message: "no token", Subject: auditchain.Subject{Prefix: "/app/"}},
	} {
		got, err := auditchain.Decode(entries[i].Canonical)
		if err != nil {
			t.Fatal(err)
		}
		if want.RequestID == "" || got.Time == "" {
			t.Errorf("record %d: no request ID or time: %+v", i, got)
		}
		got.Sequence, got.Time, got.PrevHash = 0, "", ""
		if got != want {
			t.Errorf("record %d = %+v, want %+v", i, got, want)
		}
	}
}
