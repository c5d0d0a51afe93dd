package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/server"
)

// openReflection opens a gRPC reflection stream and lists the services
// over it: the stream stays open until the test ends (a client ends a
// bidirectional stream by closing it: cancelling its context does not close
// the request body it is writing).
func openReflection(t *testing.T, client *http.Client, url string) error {
	stream := grpcreflect.NewClient(client, url, connect.WithGRPC()).NewStream(context.Background())
	t.Cleanup(func() { _, _ = stream.Close() })
	_, err := stream.ListServices()
	return err
}

// TestReflectionStreamsAreLimited: gRPC reflection streams, bidirectional
// and as long-lived as their client wants, count against the stream limit
// per principal (here per address, without an auth file) like every other
// stream.
func TestReflectionStreamsAreLimited(t *testing.T) {
	const streams = 3
	srv := testserver.Start(t, server.WithStreamLimits(streams, 0))
	client := fromAddr(t, "127.0.0.2", false, nil)
	for i := range streams {
		if err := openReflection(t, client, srv.URL); err != nil {
			t.Fatalf("reflection stream %d of %d: %v", i+1, streams, err)
		}
	}
	err := openReflection(t, client, srv.URL)
	wantCode(t, "a reflection stream over the limit", err, connect.CodeResourceExhausted,
		fmt.Sprintf("--max-streams-per-principal %d", streams), "address 127.0.0.2")
	if err := openReflection(t, fromAddr(t, "127.0.0.3", false, nil), srv.URL); err != nil {
		t.Errorf("another address, while the first holds its limit: %v", err)
	}
}

// TestSilentBidiStreamIsClosed: a bidirectional stream (gRPC reflection)
// that sends no first message is closed at the read timeout with
// DeadlineExceeded naming it; one that sent its first message lives on.
func TestSilentBidiStreamIsClosed(t *testing.T) {
	const readTimeout = 300 * time.Millisecond
	srv := testserver.Start(t, server.WithTimeouts(time.Minute, readTimeout, time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	live := grpcreflect.NewClient(testserver.HTTPClient(t), srv.URL, connect.WithGRPC()).NewStream(ctx)
	defer func() { _, _ = live.Close() }()
	if _, err := live.ListServices(); err != nil {
		t.Fatal(err)
	}

	body, bodyW := io.Pipe()
	defer bodyW.Close()
	answered := rawGRPC(t, testserver.HTTPClient(t), srv.URL+"/"+grpcreflect.ReflectV1ServiceName+"/ServerReflectionInfo", body)
	select {
	case got := <-answered:
		for _, want := range []string{"grpc-status 4 ", "first message", "--read-timeout"} {
			if !strings.Contains(got, want) {
				t.Errorf("a silent reflection stream was answered %q; want it to say %q", got, want)
			}
		}
	case <-time.After(limitBound):
		t.Fatalf("a reflection stream that sent nothing is still open %s after it opened; the read timeout is %s", limitBound, readTimeout)
	}
	// The stream that sent its first message outlived the read timeout.
	if _, err := live.ListServices(); err != nil {
		t.Errorf("a reflection stream after the read timeout: %v", err)
	}
}

// TestReflectionNeedsACredential: with an auth file, reflection needs a
// credential (any principal's, whatever its grants), and health checking
// needs none.
func TestReflectionNeedsACredential(t *testing.T) {
	token, hash := testserver.NewToken(t)
	srv := testserver.Start(t, server.WithAuthFile(testserver.WriteAuthFile(t,
		fmt.Sprintf("tokens:\n  - principal: reader\n    hash: %s\n    grants: [{role: reader, prefixes: [\"/app/\"]}]\n", hash))))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := openReflection(t, testserver.HTTPClient(t), srv.URL)
	wantCode(t, "reflection without a credential", err, connect.CodeUnauthenticated)
	if err := openReflection(t, testserver.BearerClient(t, token), srv.URL); err != nil {
		t.Errorf("reflection as a reader: %v", err)
	}
	resp, err := healthpb.NewHealthClient(dialGRPC(t, srv)).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health without a credential: %v, %v", resp, err)
	}
}
