package server_test

import (
	"context"
	"io"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
)

// These tests use grpc-go, an independent gRPC implementation, with no
// generated gRPC stubs: the methods are invoked by their full names.

func dialGRPC(t *testing.T, srv *testserver.Server) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func TestEveryRPCWithGRPCGo(t *testing.T) {
	srv := testserver.Start(t)
	conn := dialGRPC(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	watchDesc := &grpc.StreamDesc{StreamName: "Watch", ServerStreams: true}
	stream, err := conn.NewStream(ctx, watchDesc, "/pawl.v1.KVService/Watch")
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.SendMsg(&pawlv1.WatchRequest{Prefix: "/g/"}); err != nil {
		t.Fatal(err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var started pawlv1.WatchResponse
	if err := stream.RecvMsg(&started); err != nil || started.GetStarted() == nil {
		t.Fatalf("first message = %v, %v", &started, err)
	}

	var putResp pawlv1.PutResponse
	if err := conn.Invoke(ctx, "/pawl.v1.KVService/Put", &pawlv1.PutRequest{Key: "/g/a", Value: []byte("1")}, &putResp); err != nil || putResp.GetRevision() != 1 {
		t.Fatalf("Put = %v, %v", &putResp, err)
	}
	var getResp pawlv1.GetResponse
	if err := conn.Invoke(ctx, "/pawl.v1.KVService/Get", &pawlv1.GetRequest{Key: "/g/a"}, &getResp); err != nil || string(getResp.GetKv().GetValue()) != "1" {
		t.Fatalf("Get = %v, %v", &getResp, err)
	}
	var listResp pawlv1.ListResponse
	if err := conn.Invoke(ctx, "/pawl.v1.KVService/List", &pawlv1.ListRequest{Prefix: "/g/"}, &listResp); err != nil || len(listResp.GetKvs()) != 1 {
		t.Fatalf("List = %v, %v", &listResp, err)
	}
	var delResp pawlv1.DeleteResponse
	if err := conn.Invoke(ctx, "/pawl.v1.KVService/Delete", &pawlv1.DeleteRequest{Key: "/g/a"}, &delResp); err != nil || delResp.GetRevision() != 2 {
		t.Fatalf("Delete = %v, %v", &delResp, err)
	}
	err = conn.Invoke(ctx, "/pawl.v1.KVService/Put", &pawlv1.PutRequest{Key: "no-slash"}, &putResp)
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad key over gRPC: %v", err)
	}
	err = conn.Invoke(ctx, "/pawl.v1.KVService/Get", &pawlv1.GetRequest{Key: "/g/a"}, &getResp)
	if status.Code(err) != codes.NotFound {
		t.Fatalf("Get after Delete over gRPC: %v", err)
	}

	var types []pawlv1.EventType
	for len(types) < 2 {
		var msg pawlv1.WatchResponse
		if err := stream.RecvMsg(&msg); err != nil {
			t.Fatalf("watch: %v", err)
		}
		for _, ev := range msg.GetEvents().GetEvents() {
			types = append(types, ev.GetType())
		}
	}
	if !slices.Equal(types, []pawlv1.EventType{pawlv1.EventType_EVENT_TYPE_PUT, pawlv1.EventType_EVENT_TYPE_DELETE}) {
		t.Fatalf("watch event types = %v", types)
	}
	cancel()
	var msg pawlv1.WatchResponse
	if err := stream.RecvMsg(&msg); status.Code(err) != codes.Canceled {
		t.Fatalf("watch after cancel: %v", err)
	}
}

func TestHealthAndReflectionWithGRPCGo(t *testing.T) {
	srv := testserver.Start(t)
	conn := dialGRPC(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	health := healthpb.NewHealthClient(conn)
	for _, service := range []string{"", "pawl.v1.KVService"} {
		resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health of %q = %v, %v", service, resp, err)
		}
	}

	refl, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := refl.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := refl.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !slices.Contains(names, "pawl.v1.KVService") || !slices.Contains(names, "grpc.health.v1.Health") {
		t.Fatalf("reflection lists %v", names)
	}
	if err := refl.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := refl.Recv(); err != io.EOF {
		t.Fatalf("reflection stream end: %v", err)
	}
}
