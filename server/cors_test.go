package server_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/server"
)

const consoleOrigin = "https://console.example.com"

// preflight sends the OPTIONS request a browser sends before a Connect
// call from a page of origin, and returns the answer.
func preflight(t *testing.T, srv *testserver.Server, origin string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodOptions, srv.URL+pawlv1connect.KVServicePutProcedure, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Origin", origin)
	req.Header.Set("Access-Control-Request-Method", "POST")
	// Browsers send the names in lower case, sorted (the Fetch standard).
	req.Header.Set("Access-Control-Request-Headers", "authorization,connect-protocol-version,content-type")
	resp, err := testserver.HTTP1Client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp
}

// TestCORSOffByDefault: without WithCORSOrigins no answer lets a browser
// read it from another origin.
func TestCORSOffByDefault(t *testing.T) {
	srv := testserver.Start(t)
	resp := preflight(t, srv, consoleOrigin)
	if got := resp.Header.Get("Access-Control-Allow-Origin"); got != "" {
		t.Fatalf("preflight without --cors-origin: Access-Control-Allow-Origin %q", got)
	}
}

// TestCORSPreflight: a listed origin's preflight is answered 204 with
// what a Connect or gRPC-Web call needs; another origin's gets no
// Access-Control-Allow-Origin, so its browser refuses the call.
func TestCORSPreflight(t *testing.T) {
	srv := testserver.Start(t, server.WithCORSOrigins("https://other.example.com", consoleOrigin))
	resp := preflight(t, srv, consoleOrigin)
	h := resp.Header
	if resp.StatusCode != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != consoleOrigin ||
		h.Get("Access-Control-Allow-Credentials") != "true" || h.Get("Access-Control-Max-Age") != "7200" ||
		!strings.Contains(h.Get("Access-Control-Allow-Methods"), "POST") {
		t.Fatalf("preflight of %s = %d %v", consoleOrigin, resp.StatusCode, h)
	}
	allowed := strings.ToLower(h.Get("Access-Control-Allow-Headers"))
	for _, want := range []string{"content-type", "connect-protocol-version", "authorization"} {
		if !strings.Contains(allowed, want) {
			t.Fatalf("Access-Control-Allow-Headers %q lacks %s", allowed, want)
		}
	}
	for _, origin := range []string{"https://evil.example.com", "http://console.example.com", "https://console.example.com:8443"} {
		if got := preflight(t, srv, origin).Header.Get("Access-Control-Allow-Origin"); got != "" {
			t.Fatalf("preflight of %s: Access-Control-Allow-Origin %q", origin, got)
		}
	}
}

// TestCORSAnyOrigin: "*" allows every origin, without credentials.
func TestCORSAnyOrigin(t *testing.T) {
	srv := testserver.Start(t, server.WithCORSOrigins("*"))
	h := preflight(t, srv, "https://anywhere.example.org").Header
	if h.Get("Access-Control-Allow-Origin") != "*" || h.Get("Access-Control-Allow-Credentials") != "" {
		t.Fatalf("preflight with *: %v", h)
	}
}

// TestCORSOriginsChecked: what a browser never sends as an origin, and
// "*" beside others, are refused at start.
func TestCORSOriginsChecked(t *testing.T) {
	for _, origins := range [][]string{
		{"https://console.example.com/ui"}, {"console.example.com"}, {"*", consoleOrigin}, {"ftp://x.example"}, {"https://user@x.example"}, {""},
	} {
		_, err := server.New(context.Background(), server.WithDataDir(t.TempDir()), server.WithCORSOrigins(origins...))
		if err == nil || !strings.Contains(err.Error(), "WithCORSOrigins") {
			t.Fatalf("WithCORSOrigins(%q) = %v", origins, err)
		}
	}
}

// withOrigin sends origin on every request, as a browser does on a
// cross-origin call.
type withOrigin struct {
	origin string
	next   http.RoundTripper
}

func (o withOrigin) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Origin", o.origin)
	return o.next.RoundTrip(r)
}

// TestCORSCalls: a call from a listed origin, by Connect and gRPC-Web,
// carries the headers that let its page read the answer, an error's
// status and its details included.
func TestCORSCalls(t *testing.T) {
	srv := testserver.Start(t, server.WithCORSOrigins(consoleOrigin))
	client := &http.Client{Transport: withOrigin{origin: consoleOrigin, next: testserver.HTTP1Client(t).Transport}}
	for name, opts := range map[string][]connect.ClientOption{"connect": nil, "grpcweb": {connect.WithGRPCWeb()}} {
		kv := pawlv1connect.NewKVServiceClient(client, srv.URL, opts...)
		res, err := kv.Put(context.Background(), connect.NewRequest(&pawlv1.PutRequest{Key: "/cors/" + name, Value: []byte("1")}))
		if err != nil || res.Header().Get("Access-Control-Allow-Origin") != consoleOrigin {
			t.Fatalf("%s: Put = %v, %v", name, res, err)
		}
		stale := int64(999)
		_, err = kv.Put(context.Background(), connect.NewRequest(&pawlv1.PutRequest{Key: "/cors/" + name, Value: []byte("2"), ExpectedModRevision: &stale}))
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != connect.CodeFailedPrecondition || ce.Meta().Get("Access-Control-Allow-Origin") != consoleOrigin {
			t.Fatalf("%s: stale Put = %v (meta %v)", name, err, ce.Meta())
		}
		if name == "grpcweb" && !strings.Contains(ce.Meta().Get("Access-Control-Expose-Headers"), "Grpc-Status-Details-Bin") {
			t.Fatalf("gRPC-Web error: its details are not exposed: %v", ce.Meta())
		}
	}
}
