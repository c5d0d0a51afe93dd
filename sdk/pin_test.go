package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/sdk"
)

// TestARequestSeesOnlyItsPinnedGeneration: a request that starts on
// generation 1 keeps reading generation 1 after generation 2 is applied
// in the middle of it; the next request reads generation 2.
func TestARequestSeesOnlyItsPinnedGeneration(t *testing.T) {
	h := newHarness(t)
	c := h.client("svc")
	h.waitRegistered("svc")
	h.release(50, nil)
	has(t, c, 1)

	inside, proceed := make(chan struct{}), make(chan struct{})
	var first int64
	srv := httptest.NewServer(c.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := sdk.Pinned(r.Context(), "routing")
		if r.URL.Path == "/slow" {
			first = s.Generation
			close(inside)
			<-proceed
		}
		v, err := sdk.JSON[table](sdk.Pinned(r.Context(), "routing"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, "%d:%d", sdk.Pinned(r.Context(), "routing").Generation, v.Upstreams[0].Weight)
	})))
	defer srv.Close()
	get := func(path string) string {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Error(err)
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	slow := make(chan string, 1)
	go func() { slow <- get("/slow") }()
	<-inside
	h.release(70, nil)
	has(t, c, 2)
	close(proceed)
	if got := <-slow; first != 1 || got != "1:50" {
		t.Fatalf("the request that spanned the change read %d then %q", first, got)
	}
	if got := get("/fast"); got != "2:70" {
		t.Fatalf("a request after the change read %q", got)
	}
}

// TestADownstreamWithoutThePinnedGenerationRefuses: an upstream instance
// on generation 2 calls a downstream still on generation 1 with its pin;
// over HTTP the downstream answers 409, over Connect FailedPrecondition,
// after waiting the pin wait, naming the pin; pinned to a generation it
// has, it answers from that generation.
func TestADownstreamWithoutThePinnedGenerationRefuses(t *testing.T) {
	h := newHarness(t)
	up := h.client("up", sdk.WithLabels(map[string]string{"canary": "true"}))
	const pinWait = 300 * time.Millisecond
	down := h.client("down", sdk.WithPinWait(pinWait))
	h.waitRegistered("up", "down")
	h.release(50, nil)
	has(t, up, 1)
	has(t, down, 1)
	// Generation 2 reaches the canary and stays on trial for an hour:
	// the downstream is not assigned it.
	h.release(70, func(spec *pawlv1.ReleaseSpec) {
		canaryThenEveryone(spec)
		spec.HealthWindow = durationpb.New(time.Hour)
	})
	has(t, up, 2)

	mux := http.NewServeMux()
	mux.Handle("/", down.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%d", sdk.Pinned(r.Context(), "routing").Generation)
	})))
	mux.Handle("/test.Echo/Get", connect.NewUnaryHandler("/test.Echo/Get",
		func(ctx context.Context, _ *connect.Request[emptypb.Empty]) (*connect.Response[emptypb.Empty], error) {
			resp := connect.NewResponse(&emptypb.Empty{})
			resp.Header().Set("Served-Generation", fmt.Sprint(sdk.Pinned(ctx, "routing").Generation))
			return resp, nil
		}, connect.WithInterceptors(down.Interceptor())))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	httpClient := &http.Client{Transport: sdk.PinTransport(nil)}
	defer httpClient.CloseIdleConnections()
	echo := connect.NewClient[emptypb.Empty, emptypb.Empty](httpClient, srv.URL+"/test.Echo/Get", connect.WithInterceptors(up.Interceptor()))

	// Pinned to generation 2, which the downstream does not have.
	ctx := up.Pin(context.Background())
	if got := sdk.PinHeaderValue(ctx); got != "routing=2" {
		t.Fatalf("the upstream's pins = %q", got)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/", nil)
	began := time.Now()
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict || resp.Header.Get(sdk.MissingPinHeader) != "routing=2" ||
		!strings.Contains(string(body), "pinned to routing generation 2, which this instance does not have (it runs generation 1") {
		t.Fatalf("HTTP answer = %d %v %q", resp.StatusCode, resp.Header, body)
	}
	if waited := time.Since(began); waited < pinWait {
		t.Fatalf("refused after %s, before the pin wait of %s", waited, pinWait)
	}
	_, err = echo.CallUnary(ctx, connect.NewRequest(&emptypb.Empty{}))
	var cerr *connect.Error
	if !errors.As(err, &cerr) || cerr.Code() != connect.CodeFailedPrecondition || cerr.Meta().Get(sdk.MissingPinHeader) != "routing=2" {
		t.Fatalf("Connect answer = %v", err)
	}

	// Pinned to generation 1, which both have: answered from it.
	req, _ = http.NewRequest(http.MethodGet, srv.URL+"/", nil)
	req.Header.Set(sdk.PinHeader, "routing=1, other-config=9")
	resp, err = httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "1" {
		t.Fatalf("pinned to a generation it has: %d %q", resp.StatusCode, body)
	}
	// A malformed pin is a bad request.
	req, _ = http.NewRequest(http.MethodGet, srv.URL+"/", nil)
	req.Header.Set(sdk.PinHeader, "routing=one")
	resp, err = httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a malformed pin: %d", resp.StatusCode)
	}
	// Once both run the same generation, the Connect call succeeds.
	h.release(71, nil) // a newer release both apply
	has(t, down, 3)
	has(t, up, 3)
	res, err := echo.CallUnary(up.Pin(context.Background()), connect.NewRequest(&emptypb.Empty{}))
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Header().Get("Served-Generation"); got != "3" {
		t.Fatalf("served from generation %s", got)
	}
}

// TestAHandlerWithoutTheMiddlewareReadsTheCurrentSnapshot: a handler
// that is not wrapped with the middleware reads the current snapshot
// through Client.Pinned, and sdk.Pinned's nil, given to JSON, says how
// to pin rather than that there is no snapshot.
func TestAHandlerWithoutTheMiddlewareReadsTheCurrentSnapshot(t *testing.T) {
	h := newHarness(t)
	c := h.client("svc")
	h.waitRegistered("svc")
	h.release(50, nil)
	has(t, c, 1)

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sdk.IsPinned(r.Context()) {
			http.Error(w, "pinned without the middleware", http.StatusInternalServerError)
			return
		}
		if _, err := sdk.JSON[table](sdk.Pinned(r.Context(), "routing")); !errors.Is(err, sdk.ErrNoSnapshot) ||
			!strings.Contains(err.Error(), "wrap the handler with client.Middleware") {
			http.Error(w, fmt.Sprintf("sdk.Pinned on an unpinned request: %v", err), http.StatusInternalServerError)
			return
		}
		v, err := sdk.JSON[table](c.Pinned(r.Context(), "routing"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, "%d:%d", c.Pinned(r.Context(), "routing").Generation, v.Upstreams[0].Weight)
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(body) != "1:50" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	pinned := c.Pin(context.Background())
	if !sdk.IsPinned(pinned) || c.Pinned(pinned, "routing") != sdk.Pinned(pinned, "routing") {
		t.Fatal("a pinned context reads its pin through Client.Pinned")
	}
}
