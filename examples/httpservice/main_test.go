package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/durationpb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/internal/testkit/wasmbuild"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		wasmbuild.Cleanup()
		os.Exit(code)
	}))
}

// service runs the example with args until the test ends; it returns the
// address it serves and its output lines.
func service(t *testing.T, args ...string) (string, <-chan string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r, w := io.Pipe()
	lines := make(chan string, 100)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer close(lines)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	go func() {
		defer wg.Done()
		// Compiled modules come from the tests' shared cache, which the
		// server filled when the validator was uploaded: compiling a
		// Go-built validator afresh takes the optimizing compiler a minute
		// under -race on a loaded machine. There, even the module's start
		// (the Go runtime's) can take longer than the default second, and
		// the release would be rejected: the example's limit is what is
		// tested elsewhere, not here.
		args = append(args, "--listen", "127.0.0.1:0", "--validator-cache", wasmbuild.CacheDir(t), "--validator-timeout", "30s")
		if err := run(ctx, args, w); err != nil {
			t.Error(err)
		}
		w.Close()
	}()
	t.Cleanup(func() {
		cancel()
		for range lines {
		}
		wg.Wait()
	})
	addr := strings.TrimPrefix(await(t, lines, "listening on "), "listening on ")
	return "http://" + addr, lines
}

func await(t *testing.T, lines <-chan string, prefix string) string {
	t.Helper()
	timeout := time.After(time.Minute)
	var seen []string
	for {
		select {
		case line := <-lines:
			if strings.HasPrefix(line, prefix) {
				return line
			}
			seen = append(seen, line)
		case <-timeout:
			t.Fatalf("no line starting %q; the service printed:\n%s", prefix, strings.Join(seen, "\n"))
		}
	}
}

func get(t *testing.T, url string, header ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestTheWalkThrough follows README.md: two services pick up a release,
// answer from one generation end to end, and refuse a request pinned to
// a generation they do not have.
func TestTheWalkThrough(t *testing.T) {
	srv := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := testserver.HTTPClient(t)
	vs := pawlv1connect.NewValidatorServiceClient(client, srv.URL)
	rs := pawlv1connect.NewReleaseServiceClient(client, srv.URL)
	up, err := vs.Upload(ctx, connect.NewRequest(&pawlv1.UploadRequest{Wasm: wasmbuild.Build(t, "jsonschema")}))
	if err != nil {
		t.Fatal(err)
	}
	kv := pawlv1connect.NewKVServiceClient(client, srv.URL)
	registrations, err := kv.Watch(ctx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: "/_pawl/instances/", StartRevision: 1}))
	if err != nil {
		t.Fatal(err)
	}
	defer registrations.Close()
	back, backLines := service(t, "--server", srv.URL, "--identity", "back-1")
	front, frontLines := service(t, "--server", srv.URL, "--identity", "front-1", "--downstream", back)
	if code, body := get(t, front); code != http.StatusServiceUnavailable {
		t.Fatalf("before any release: %d %q", code, body)
	}
	// Both registered: the release freezes them into its membership.
	for registered := map[string]bool{}; len(registered) < 2; {
		if !registrations.Receive() {
			t.Fatal(registrations.Err())
		}
		for _, ev := range registrations.Msg().GetEvents().GetEvents() {
			registered[ev.GetKv().GetKey()] = true
		}
	}
	params, err := os.ReadFile("greeting.params.json")
	if err != nil {
		t.Fatal(err)
	}
	content, err := os.ReadFile("greeting.json")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: &pawlv1.ReleaseSpec{
		ConfigId: "greeting", MediaType: "application/json", ValidatorDigest: up.Msg.GetValidator().GetDigest(), Content: content,
		ValidatorParams: params, HealthWindow: durationpb.New(time.Second), Deadline: durationpb.New(time.Hour),
		Stages: []*pawlv1.Stage{{Name: "all", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}}},
	}})); err != nil {
		t.Fatal(err)
	}
	await(t, backLines, "applied greeting generation 1")
	await(t, frontLines, "applied greeting generation 1")
	code, body := get(t, front)
	if want := "front-1: hello from generation one (greeting generation 1)\nback-1: hello from generation one (greeting generation 1)\n"; code != http.StatusOK || body != want {
		t.Fatalf("front = %d %q", code, body)
	}
	code, body = get(t, back, "Pawl-Pin", "greeting=2")
	if code != http.StatusConflict || !strings.Contains(body, "pinned to greeting generation 2, which this instance does not have") {
		t.Fatalf("pinned to a generation back-1 lacks: %d %q", code, body)
	}
}
