package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
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

// runAgent runs the agent with args until the test ends and returns its
// output lines as they come, with its log's lines (stderr) among them. Its
// cache is a temporary directory and its validator timeout 30 s unless
// args set them.
func runAgent(t *testing.T, args ...string) <-chan string {
	t.Helper()
	// Compiled modules come from the tests' shared cache: compiling a
	// Go-built validator afresh for every agent takes the optimizing
	// compiler seconds, and far longer under -race on a loaded machine.
	args = append(args, "--validator-cache", wasmbuild.CacheDir(t))
	if !slices.Contains(args, "--cache-dir") {
		args = append(args, "--cache-dir", t.TempDir())
	}
	if !slices.Contains(args, "--validator-timeout") {
		// 400 kB documents have taken the validator over the 1 s
		// default on two loaded cores under -race.
		args = append(args, "--validator-timeout", "30s")
	}
	ctx, cancel := context.WithCancel(context.Background())
	r, w := io.Pipe()
	er, ew := io.Pipe()
	lines := make(chan string, 1024)
	var wg, scanners sync.WaitGroup
	wg.Add(2)
	scanners.Add(2)
	for _, src := range []io.Reader{r, er} {
		go func() {
			defer scanners.Done()
			sc := bufio.NewScanner(src)
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				if src == er {
					// The log never waits for a test that does not
					// read it: past the buffer, its lines are dropped.
					select {
					case lines <- sc.Text():
					default:
					}
					continue
				}
				lines <- sc.Text()
			}
			_, _ = io.Copy(io.Discard, src)
		}()
	}
	go func() {
		defer wg.Done()
		scanners.Wait()
		close(lines)
	}()
	var stderr strings.Builder
	var code int
	go func() {
		defer wg.Done()
		code = run(ctx, args, w, io.MultiWriter(&syncWriter{w: &stderr}, ew))
		w.Close()
		ew.Close()
	}()
	t.Cleanup(func() {
		cancel()
		for range lines {
		}
		wg.Wait()
		if code != 0 {
			t.Errorf("pawl-agent exited %d: %s", code, stderr.String())
		}
	})
	return lines
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// await reads lines until one contains want.
func await(t *testing.T, lines <-chan string, want string) string {
	t.Helper()
	return awaitAny(t, lines, want)
}

// awaitAny reads lines until one contains any of wants, and returns it.
func awaitAny(t *testing.T, lines <-chan string, wants ...string) string {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("the agent stopped before a line with any of %q", wants)
			}
			for _, w := range wants {
				if strings.Contains(line, w) {
					return line
				}
			}
		case <-timeout:
			t.Fatalf("no line with any of %q", wants)
		}
	}
}

// bigRouting is a valid routing table of about 400 kB, different for
// each n.
func bigRouting(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"upstreams":[`)
	for i := range 100 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"host":"%s-%d-%d","weight":1}`, strings.Repeat("h", 4000), n, i)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// TestTheFileIsNeverSeenHalfWritten: a reader polls the config file while
// the agent replaces it with five releases of 400 kB; every read is one
// release's content, whole.
func TestTheFileIsNeverSeenHalfWritten(t *testing.T) {
	srv := testserver.Start(t)
	client := testserver.HTTPClient(t)
	up, err := uploadRouting(t, srv, client)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rs := pawlv1connect.NewReleaseServiceClient(client, srv.URL)
	dir := t.TempDir()
	execLog := filepath.Join(t.TempDir(), "exec.log")
	// The reader below keeps a core busy; 400 kB take their time to
	// validate on what is left of two cores.
	lines := runAgent(t, "--server", srv.URL, "--identity", "agent-1", "--dir", dir, "--validator-timeout", "30s",
		"--exec", `echo "$PAWL_CONFIG $PAWL_GENERATION" >> `+execLog)

	var mu sync.Mutex
	valid := map[string]bool{}
	done := make(chan struct{})
	var reads, whole int
	var bad []string
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		path := filepath.Join(dir, "configs", "routing")
		for {
			select {
			case <-done:
				return
			default:
			}
			b, err := os.ReadFile(path)
			if err != nil {
				continue // not written yet
			}
			mu.Lock()
			reads++
			if valid[string(b)] {
				whole++
			} else if len(bad) < 3 {
				bad = append(bad, fmt.Sprintf("%d bytes", len(b)))
			}
			mu.Unlock()
		}
	}()
	// The agent registers; each release then freezes it as a member.
	for n := 1; n <= 5; n++ {
		content := bigRouting(n)
		mu.Lock()
		valid[string(content)] = true
		mu.Unlock()
		if _, err := rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: &pawlv1.ReleaseSpec{
			ConfigId: "routing", MediaType: "application/json", ValidatorDigest: up.Msg.GetValidator().GetDigest(), Content: content,
			Stages:   []*pawlv1.Stage{{Name: "all", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}}},
			Deadline: durationpb.New(time.Hour),
		}})); err != nil {
			t.Fatal(err)
		}
		await(t, lines, fmt.Sprintf("wrote routing generation %d to ", n))
	}
	close(done)
	wg.Wait()
	if reads == 0 || whole != reads {
		t.Fatalf("%d reads, %d of them a whole release; others: %v", reads, whole, bad)
	}
	t.Logf("%d reads while the agent wrote five releases, every one whole", reads)
	b, err := os.ReadFile(execLog)
	// The run at start (no config yet), then one per release.
	if err != nil || !strings.HasPrefix(string(b), " \nrouting 1\n") {
		t.Fatalf("--exec log = %q, %v", b, err)
	}
}

// TestTheAgentMirrorsAPrefix: keys under the prefix become files under
// DIR/kv/, changes replace them, deletes remove them, and a key that
// would leave the directory is skipped.
func TestTheAgentMirrorsAPrefix(t *testing.T) {
	srv := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kv := pawlv1connect.NewKVServiceClient(testserver.HTTPClient(t), srv.URL)
	put := func(key, value string) {
		if _, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: key, Value: []byte(value)})); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	put("/flags/checkout/new-ui", "on")
	lines := runAgent(t, "--server", srv.URL, "--no-assignments", "--prefix", "/flags/", "--dir", dir)
	await(t, lines, "mirrored 1 keys under /flags/")
	read := func(rel string) string {
		b, err := os.ReadFile(filepath.Join(dir, "kv", rel))
		if err != nil {
			return "<" + err.Error() + ">"
		}
		return string(b)
	}
	if got := read("checkout/new-ui"); got != "on" {
		t.Fatalf("checkout/new-ui = %q", got)
	}
	put("/flags/search/ranking", "v2")
	await(t, lines, "wrote /flags/search/ranking")
	put("/flags/checkout/new-ui", "off")
	await(t, lines, "wrote /flags/checkout/new-ui")
	if _, err := kv.Delete(ctx, connect.NewRequest(&pawlv1.DeleteRequest{Key: "/flags/search/ranking"})); err != nil {
		t.Fatal(err)
	}
	await(t, lines, "removed /flags/search/ranking")
	if got, ranking := read("checkout/new-ui"), read("search/ranking"); got != "off" || !strings.Contains(ranking, "no such file") {
		t.Fatalf("after the changes: new-ui %q, ranking %q", got, ranking)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--identity", "x"},                      // no --dir
		{"--dir", "d"},                           // no identity
		{"--dir", "d", "--no-assignments"},       // nothing to do
		{"--dir", "d", "--identity", "x", "arg"}, // stray argument
		{"--dir", "d", "--no-assignments", "--prefix", "flags"},
	} {
		var stderr strings.Builder
		if code := run(context.Background(), args, io.Discard, &stderr); code != 2 || stderr.Len() == 0 {
			t.Errorf("%q: exit %d, %q", args, code, stderr.String())
		}
	}
}

// startWatchingRecords starts a server with the routing validator uploaded
// (its digest) and a watch of /_pawl/, for the tests that follow what the
// server records of an agent; all end with the test, or a minute after
// the upload.
func startWatchingRecords(t *testing.T) (*testserver.Server, context.Context, *http.Client, string, *connect.ServerStreamForClient[pawlv1.WatchResponse]) {
	t.Helper()
	srv := testserver.Start(t)
	client := testserver.HTTPClient(t)
	up, err := uploadRouting(t, srv, client)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	records, err := pawlv1connect.NewKVServiceClient(client, srv.URL).Watch(ctx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: "/_pawl/"}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = records.Close() })
	// The watch follows writes only once the server has started it: a
	// record the agent writes before that (its registration, under load)
	// would never arrive.
	if !records.Receive() || records.Msg().GetStarted() == nil {
		t.Fatalf("the records watch did not start: %v, %v", records.Msg(), records.Err())
	}
	return srv, ctx, client, up.Msg.GetValidator().GetDigest(), records
}

// uploadRouting builds the routing validator and uploads it to srv, which
// compiles it into the machine's shared cache (wasmbuild.CacheDir), where
// the agents then find it. This is setup, not what the tests time: on a
// fresh machine, under -race on loaded cores, the cold compilation alone
// has taken more than a minute, and spent a test's whole minute before
// its agent started. It gets the tests' compile limit instead.
func uploadRouting(t *testing.T, srv *testserver.Server, client *http.Client) (*connect.Response[pawlv1.UploadResponse], error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wasmbuild.CompileTimeout)
	defer cancel()
	return pawlv1connect.NewValidatorServiceClient(client, srv.URL).Upload(ctx, connect.NewRequest(&pawlv1.UploadRequest{Wasm: wasmbuild.Build(t, "routing")}))
}

// TestAFailingExecReportsTheReleaseUnhealthy: the file is written, the
// reload command fails, and the instance reports the release unhealthy
// with the command's output.
func TestAFailingExecReportsTheReleaseUnhealthy(t *testing.T) {
	srv, ctx, client, digest, acks := startWatchingRecords(t)
	dir := t.TempDir()
	lines := runAgent(t, "--server", srv.URL, "--identity", "agent-1", "--dir", dir, "--exec", "echo reload refused; exit 3")
	awaitRegistered(t, acks, "agent-1")
	rs := pawlv1connect.NewReleaseServiceClient(client, srv.URL)
	if _, err := rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: &pawlv1.ReleaseSpec{
		ConfigId: "routing", MediaType: "application/json", ValidatorDigest: digest, Content: bigRouting(1),
		Stages:   []*pawlv1.Stage{{Name: "all", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}}},
		Deadline: durationpb.New(time.Hour),
	}})); err != nil {
		t.Fatal(err)
	}
	await(t, lines, "wrote routing generation 1 to ")
	ro := pawlv1connect.NewRolloutServiceClient(client, srv.URL)
	for {
		st, err := ro.GetRolloutStatus(ctx, connect.NewRequest(&pawlv1.GetRolloutStatusRequest{ConfigId: "routing", Generation: 1}))
		if err != nil {
			t.Fatal(err)
		}
		if n := len(st.Msg.GetAcks()); n > 0 && st.Msg.GetAcks()[n-1].GetState() == pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED {
			a := st.Msg.GetAcks()[n-1]
			if a.GetHealthOk() || !strings.Contains(a.GetReason(), "reload refused") || !strings.Contains(a.GetReason(), "exit status 3") {
				t.Fatalf("HEALTHY_ACKED = %v", a)
			}
			return
		}
		if !acks.Receive() { // the next record the server writes
			t.Fatal(acks.Err())
		}
	}
}

// TestAHealthCommandThatFailsAfterTheWindowStopsTheRollout: the agent
// passes the release's health window, then its --health-cmd starts
// failing; rerun every --health-interval while the rollout can still
// stop, it reports the release unhealthy at once, and the rollout stops
// with the command's output as the reason.
func TestAHealthCommandThatFailsAfterTheWindowStopsTheRollout(t *testing.T) {
	srv, ctx, client, digest, records := startWatchingRecords(t)
	// next waits for the next record the server writes.
	next := func() []*pawlv1.Event {
		if !records.Receive() {
			t.Fatal(records.Err())
		}
		return records.Msg().GetEvents().GetEvents()
	}
	diskFull := filepath.Join(t.TempDir(), "disk-full")
	runAgent(t, "--server", srv.URL, "--identity", "agent-1", "--dir", t.TempDir(), "--health-interval", "20ms",
		"--health-cmd", `if [ -e `+diskFull+` ]; then echo "the disk is full"; exit 1; fi`)
	for registered := false; !registered; {
		for _, ev := range next() {
			registered = registered || strings.HasPrefix(ev.GetKv().GetKey(), "/_pawl/instances/agent-1")
		}
	}
	rs := pawlv1connect.NewReleaseServiceClient(client, srv.URL)
	if _, err := rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: &pawlv1.ReleaseSpec{
		ConfigId: "routing", MediaType: "application/json", ValidatorDigest: digest, Content: bigRouting(1),
		Stages:       []*pawlv1.Stage{{Name: "all", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}}},
		HealthWindow: durationpb.New(100 * time.Millisecond), Deadline: durationpb.New(time.Hour),
	}})); err != nil {
		t.Fatal(err)
	}
	ro := pawlv1connect.NewRolloutServiceClient(client, srv.URL)
	status := func() *pawlv1.GetRolloutStatusResponse {
		st, err := ro.GetRolloutStatus(ctx, connect.NewRequest(&pawlv1.GetRolloutStatusRequest{ConfigId: "routing", Generation: 1}))
		if err != nil {
			t.Fatal(err)
		}
		return st.Msg
	}
	lastAck := func(st *pawlv1.GetRolloutStatusResponse) *pawlv1.Ack {
		if n := len(st.GetAcks()); n > 0 {
			return st.GetAcks()[n-1]
		}
		return nil
	}
	for a := lastAck(status()); a.GetState() != pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED || !a.GetHealthOk() || !a.GetCounted(); a = lastAck(status()) {
		next()
	}
	if err := os.WriteFile(diskFull, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	st := status()
	for ; st.GetStop() == nil; st = status() {
		next()
	}
	a := lastAck(st)
	if a.GetState() != pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED || a.GetHealthOk() || !a.GetCounted() ||
		!strings.Contains(a.GetReason(), "after the health window: health check failed: --health-cmd") || !strings.Contains(a.GetReason(), "the disk is full") {
		t.Fatalf("the report after the window = %v", a)
	}
	if stop := st.GetStop(); stop.GetStage() != "all" {
		t.Fatalf("stopped by %+v", stop)
	}
}
