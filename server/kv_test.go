package server_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/internal/testkit/wasmbuild"
	"github.com/pawlcfg/pawl/server"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		wasmbuild.Cleanup()
		os.Exit(code)
	}))
}

// protocols are the ways a Connect client reaches pawld.
var protocols = []struct {
	name   string
	client func(testing.TB) *http.Client
	opts   []connect.ClientOption
}{
	{"connect-http1", testserver.HTTP1Client, nil},
	{"connect-h2c", testserver.HTTPClient, nil},
	{"grpc", testserver.HTTPClient, []connect.ClientOption{connect.WithGRPC()}},
	{"grpc-web", testserver.HTTPClient, []connect.ClientOption{connect.WithGRPCWeb()}},
}

func newKV(t testing.TB, srv *testserver.Server) pawlv1connect.KVServiceClient {
	return pawlv1connect.NewKVServiceClient(testserver.HTTPClient(t), srv.URL, connect.WithGRPC())
}

func put(t testing.TB, kv pawlv1connect.KVServiceClient, key, value string) int64 {
	t.Helper()
	resp, err := kv.Put(context.Background(), connect.NewRequest(&pawlv1.PutRequest{Key: key, Value: []byte(value)}))
	if err != nil {
		t.Fatalf("Put(%s): %v", key, err)
	}
	return resp.Msg.GetRevision()
}

func currentRevision(t testing.TB, kv pawlv1connect.KVServiceClient) int64 {
	t.Helper()
	resp, err := kv.List(context.Background(), connect.NewRequest(&pawlv1.ListRequest{PageSize: 1}))
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	return resp.Msg.GetRevision()
}

// TestEveryRPCOverEveryProtocol drives Put, Get, Delete, List and Watch with
// the generated Connect client in each protocol.
func TestEveryRPCOverEveryProtocol(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			srv := testserver.Start(t)
			kv := pawlv1connect.NewKVServiceClient(p.client(t), srv.URL, p.opts...)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()

			stream, err := kv.Watch(ctx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: "/app/"}))
			if err != nil {
				t.Fatal(err)
			}
			defer stream.Close()
			if !stream.Receive() || stream.Msg().GetStarted() == nil {
				t.Fatalf("first watch message = %v, %v; want started", stream.Msg(), stream.Err())
			}

			putResp, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "/app/a", Value: []byte("1")}))
			if err != nil || putResp.Msg.GetRevision() != 1 || putResp.Msg.GetPrevKv() != nil {
				t.Fatalf("Put = %v, %v", putResp, err)
			}
			putResp, err = kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "/app/a", Value: []byte("2"), ExpectedModRevision: ptr(1)}))
			if err != nil || putResp.Msg.GetRevision() != 2 || string(putResp.Msg.GetPrevKv().GetValue()) != "1" {
				t.Fatalf("CAS Put = %v, %v", putResp, err)
			}
			put(t, kv, "/app/b", "3")
			put(t, kv, "/other", "x")

			get, err := kv.Get(ctx, connect.NewRequest(&pawlv1.GetRequest{Key: "/app/a"}))
			if err != nil || string(get.Msg.GetKv().GetValue()) != "2" || get.Msg.GetKv().GetVersion() != 2 || get.Msg.GetRevision() != 4 {
				t.Fatalf("Get = %v, %v", get.Msg, err)
			}
			get, err = kv.Get(ctx, connect.NewRequest(&pawlv1.GetRequest{Key: "/app/a", Revision: 1}))
			if err != nil || string(get.Msg.GetKv().GetValue()) != "1" || get.Msg.GetRevision() != 1 {
				t.Fatalf("Get at revision 1 = %v, %v", get.Msg, err)
			}

			del, err := kv.Delete(ctx, connect.NewRequest(&pawlv1.DeleteRequest{Key: "/app/b"}))
			if err != nil || del.Msg.GetRevision() != 5 || string(del.Msg.GetPrevKv().GetValue()) != "3" {
				t.Fatalf("Delete = %v, %v", del, err)
			}

			list, err := kv.List(ctx, connect.NewRequest(&pawlv1.ListRequest{Prefix: "/", PageSize: 1}))
			if err != nil || len(list.Msg.GetKvs()) != 1 || list.Msg.GetKvs()[0].GetKey() != "/app/a" || list.Msg.GetNextPageToken() == "" {
				t.Fatalf("List page 1 = %v, %v", list.Msg, err)
			}
			// A write between pages does not show: pages share a revision.
			put(t, kv, "/app/c", "late")
			list, err = kv.List(ctx, connect.NewRequest(&pawlv1.ListRequest{Prefix: "/", PageSize: 1, PageToken: list.Msg.GetNextPageToken()}))
			if err != nil || len(list.Msg.GetKvs()) != 1 || list.Msg.GetKvs()[0].GetKey() != "/other" || list.Msg.GetNextPageToken() != "" || list.Msg.GetRevision() != 5 {
				t.Fatalf("List page 2 = %v, %v", list.Msg, err)
			}

			var got []string
			for len(got) < 4 && stream.Receive() {
				for _, ev := range stream.Msg().GetEvents().GetEvents() {
					got = append(got, fmt.Sprintf("%s %s %d prev=%d", ev.GetType(), ev.GetKv().GetKey(), ev.GetKv().GetModRevision(), ev.GetPrevRevision()))
				}
			}
			want := []string{
				"EVENT_TYPE_PUT /app/a 1 prev=0",
				"EVENT_TYPE_PUT /app/a 2 prev=1",
				"EVENT_TYPE_PUT /app/b 3 prev=0",
				"EVENT_TYPE_DELETE /app/b 5 prev=3",
			}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("watch events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

func ptr(v int64) *int64 { return &v }

// TestBadInputIsRefusedAndChangesNothing checks every refusal's code and
// message, and that the revision did not move.
func TestBadInputIsRefusedAndChangesNothing(t *testing.T) {
	srv := testserver.Start(t, server.WithMaxValueBytes(1024))
	kv := newKV(t, srv)
	put(t, kv, "/exists", "v") // revision 1
	ctx := context.Background()
	longKey := "/" + strings.Repeat("k", 1024)
	cases := []struct {
		name string
		call func() error
		code connect.Code
		msg  string
	}{
		{"empty key", func() error { _, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: ""})); return err },
			connect.CodeInvalidArgument, "the key is empty"},
		{"key without slash", func() error { _, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "a"})); return err },
			connect.CodeInvalidArgument, `does not start with "/"`},
		{"key over 1 KiB", func() error { _, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: longKey})); return err },
			connect.CodeInvalidArgument, "the key is 1025 bytes; the limit is 1024"},
		{"key with NUL", func() error {
			_, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "/a\x00b"}))
			return err
		},
			connect.CodeInvalidArgument, "NUL"},
		{"value over the limit", func() error {
			_, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "/big", Value: make([]byte, 1025)}))
			return err
		}, connect.CodeResourceExhausted, "the value is 1025 bytes; the limit is 1024 bytes"},
		{"value far over the limit", func() error {
			_, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "/big", Value: make([]byte, 1<<20)}))
			return err
		}, connect.CodeResourceExhausted, ""},
		{"system key", func() error {
			_, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "/_pawl/configs/x/head", Value: []byte("9")}))
			return err
		}, connect.CodePermissionDenied, "keys under /_pawl/ are Pawl's own records"},
		{"system key delete", func() error {
			_, err := kv.Delete(ctx, connect.NewRequest(&pawlv1.DeleteRequest{Key: "/_pawl/configs/x/head"}))
			return err
		}, connect.CodePermissionDenied, "can be read but change only through their services"},
		{"negative expected revision", func() error {
			_, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "/exists", ExpectedModRevision: ptr(-1)}))
			return err
		}, connect.CodeInvalidArgument, "expected_mod_revision is -1"},
		{"CAS mismatch", func() error {
			_, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "/exists", ExpectedModRevision: ptr(7)}))
			return err
		}, connect.CodeFailedPrecondition, `key "/exists" is at mod revision 1, not 7`},
		{"create-only on existing key", func() error {
			_, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "/exists", ExpectedModRevision: ptr(0)}))
			return err
		}, connect.CodeFailedPrecondition, "is at mod revision 1, not 0"},
		{"delete CAS mismatch", func() error {
			_, err := kv.Delete(ctx, connect.NewRequest(&pawlv1.DeleteRequest{Key: "/exists", ExpectedModRevision: ptr(3)}))
			return err
		}, connect.CodeFailedPrecondition, "is at mod revision 1, not 3"},
		{"delete of a missing key", func() error {
			_, err := kv.Delete(ctx, connect.NewRequest(&pawlv1.DeleteRequest{Key: "/missing"}))
			return err
		}, connect.CodeNotFound, `key "/missing" does not exist`},
		{"get of a missing key", func() error {
			_, err := kv.Get(ctx, connect.NewRequest(&pawlv1.GetRequest{Key: "/missing"}))
			return err
		},
			connect.CodeNotFound, `key "/missing" does not exist at revision 1`},
		{"negative revision", func() error {
			_, err := kv.Get(ctx, connect.NewRequest(&pawlv1.GetRequest{Key: "/exists", Revision: -2}))
			return err
		}, connect.CodeInvalidArgument, "revision is -2"},
		{"future revision", func() error {
			_, err := kv.Get(ctx, connect.NewRequest(&pawlv1.GetRequest{Key: "/exists", Revision: 9}))
			return err
		}, connect.CodeInvalidArgument, "revision 9 is in the future: the current revision is 1"},
		{"list future revision", func() error { _, err := kv.List(ctx, connect.NewRequest(&pawlv1.ListRequest{Revision: 2})); return err },
			connect.CodeInvalidArgument, "current revision is 1"},
		{"list bad prefix", func() error {
			_, err := kv.List(ctx, connect.NewRequest(&pawlv1.ListRequest{Prefix: "app"}))
			return err
		},
			connect.CodeInvalidArgument, "invalid prefix"},
		{"list negative page size", func() error {
			_, err := kv.List(ctx, connect.NewRequest(&pawlv1.ListRequest{PageSize: -1}))
			return err
		},
			connect.CodeInvalidArgument, "page_size is -1"},
		{"list bad page token", func() error {
			_, err := kv.List(ctx, connect.NewRequest(&pawlv1.ListRequest{PageToken: "garbage!"}))
			return err
		}, connect.CodeInvalidArgument, "page_token"},
		{"watch negative start", func() error { return watchError(ctx, kv, &pawlv1.WatchRequest{StartRevision: -1}) },
			connect.CodeInvalidArgument, "start_revision is -1"},
		{"watch future start", func() error { return watchError(ctx, kv, &pawlv1.WatchRequest{StartRevision: 3}) },
			connect.CodeInvalidArgument, "revision 3 is in the future"},
		{"watch bad prefix", func() error { return watchError(ctx, kv, &pawlv1.WatchRequest{Prefix: "x"}) },
			connect.CodeInvalidArgument, "invalid prefix"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			if connect.CodeOf(err) != c.code {
				t.Fatalf("error = %v, want code %v", err, c.code)
			}
			if !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("error %q does not say %q", err, c.msg)
			}
			if rev := currentRevision(t, kv); rev != 1 {
				t.Fatalf("a refused request moved the revision to %d", rev)
			}
		})
	}
	get, err := kv.Get(ctx, connect.NewRequest(&pawlv1.GetRequest{Key: "/exists"}))
	if err != nil || string(get.Msg.GetKv().GetValue()) != "v" {
		t.Fatalf("/exists after refusals = %v, %v", get, err)
	}
}

// watchError opens a watch and returns the error it ends with.
func watchError(ctx context.Context, kv pawlv1connect.KVServiceClient, req *pawlv1.WatchRequest) error {
	stream, err := kv.Watch(ctx, connect.NewRequest(req))
	if err != nil {
		return err
	}
	defer stream.Close()
	for stream.Receive() {
	}
	if stream.Err() == nil {
		return errors.New("watch ended without an error")
	}
	return stream.Err()
}

func TestUnknownProtocolAndProcedure(t *testing.T) {
	srv := testserver.Start(t)
	client := testserver.HTTP1Client(t)
	resp, err := client.Post(srv.URL+"/pawl.v1.KVService/Put", "text/plain", strings.NewReader("key=/a"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Fatalf("text/plain request: status %d, want 415", resp.StatusCode)
	}
	kv := pawlv1connect.NewKVServiceClient(client, srv.URL+"/nope")
	_, err = kv.Get(context.Background(), connect.NewRequest(&pawlv1.GetRequest{Key: "/a"}))
	if code := connect.CodeOf(err); code != connect.CodeUnimplemented && code != connect.CodeNotFound {
		t.Fatalf("unknown procedure: %v", err)
	}
	if rev := currentRevision(t, newKV(t, srv)); rev != 0 {
		t.Fatalf("revision %d after refused requests", rev)
	}
}
