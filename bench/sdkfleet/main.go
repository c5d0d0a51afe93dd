// Command sdkfleet measures the Go SDK: a thousand sdk.Clients in this one
// process, against pawld running as its own process over loopback (so
// that this process's memory is the clients'), and prints a Markdown
// table:
//
//	go run ./bench/sdkfleet -clients 1000 -promotions 5
//
// What it measures, in order:
//   - resident memory this process gains with its first client (which
//     brings the validator runtime and the compiled module) and with each
//     further client, once every client applied a release;
//   - Promote to every client having applied the new generation (p50, p99
//     and max over the clients, per promotion): a canary client passes its
//     stage, the release is promoted, and each client downloads it,
//     verifies it, validates it with the shared validator runtime and
//     swaps it in;
//   - one more client's time to its first applied config with a cold
//     validator cache (an empty cache directory: download and compile the
//     module) and a warm one (the cache a previous run of the same
//     instance left: the snapshot is served from it at once, and the
//     server's assignment is applied after it).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pawlcfg/pawl/bench/internal/benchkit"
	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/sdk"
)

type options struct {
	clients, promotions int
	pawld               string
	idleWait            time.Duration
	// unary makes the clients use the unary calls, not a session each.
	unary bool
	// memProfile, when set, is where a heap profile of this process goes
	// once every client applied (what the clients hold).
	memProfile string
	// validator is the example module under validators/examples the
	// routing config is checked with (on the server and in every client).
	validator string
	// profiles, when set, is a directory for CPU profiles of pawld and of
	// this process over the first timed promotion.
	profiles string
	// phases traces the clients' steps of the first timed promotion and
	// reports when they reached each.
	phases bool
}

func main() {
	var o options
	flag.IntVar(&o.clients, "clients", 1000, "SDK clients in this process")
	flag.IntVar(&o.promotions, "promotions", 5, "promotions to time")
	flag.StringVar(&o.pawld, "pawld", "", "pawld binary (default: built from ./cmd/pawld)")
	flag.DurationVar(&o.idleWait, "idle-wait", 40*time.Second, "how long to wait before measuring memory at rest (validators unload after 30s unused)")
	flag.BoolVar(&o.unary, "unary", false, "clients use the unary calls and streams (sdk.WithoutSession), not one session each")
	flag.StringVar(&o.validator, "validator", "routing", "the routing validator: routing (Go) or routing-rust")
	flag.StringVar(&o.profiles, "profiles", "", "write CPU profiles of pawld and of this process (the clients) over the first timed promotion to this directory")
	flag.BoolVar(&o.phases, "phases", false, "trace the clients' steps (download, verify, validate, stage, apply) of the first timed promotion and report when they reached each")
	flag.StringVar(&o.memProfile, "memprofile", "", "write a heap profile of this process (the clients) here once every client applied")
	flag.Parse()
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "sdkfleet:", err)
		os.Exit(1)
	}
}

type bench struct {
	o       options
	srv     *benchkit.Pawld
	dir     string
	digest  string
	rs      pawlv1connect.ReleaseServiceClient
	ro      pawlv1connect.RolloutServiceClient
	is      pawlv1connect.InstanceServiceClient
	clients []*sdk.Client
	quiet   *slog.Logger
	// clientLog is the clients' logger: warnings and errors only.
	clientLog *slog.Logger
	// pprofURL is where pawld serves its profiles.
	pprofURL string
	// phases records the clients' steps (with -phases; nil otherwise),
	// tracer the clients' tracer provider that feeds it.
	phases *phases
	tracer *sdktrace.TracerProvider

	mu      sync.Mutex
	applied map[int64][]time.Time // generation -> when each client swapped it in
	changed chan struct{}         // closed, and replaced, on every swap
}

func run(ctx context.Context, o options) error {
	dir, err := os.MkdirTemp("", "pawl-sdkfleet")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	pprofAddr, err := benchkit.FreeAddr()
	if err != nil {
		return err
	}
	srv, err := benchkit.StartPawld(ctx, o.pawld, dir, "--instance-lease", "30s", "--pprof", pprofAddr)
	if err != nil {
		return err
	}
	b0 := "http://" + pprofAddr
	defer srv.Stop()
	b := &bench{o: o, srv: srv, dir: dir, pprofURL: b0, quiet: slog.New(slog.NewTextHandler(io.Discard, nil)),
		clientLog: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		applied:   map[int64][]time.Time{}, changed: make(chan struct{})}
	if o.phases {
		b.phases = &phases{}
		b.tracer = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b.phases))
		defer func() { _ = b.tracer.Shutdown(context.Background()) }()
	}
	b.rs = pawlv1connect.NewReleaseServiceClient(httpClient(), srv.URL)
	b.ro = pawlv1connect.NewRolloutServiceClient(httpClient(), srv.URL)
	b.is = pawlv1connect.NewInstanceServiceClient(httpClient(), srv.URL)
	defer func() {
		for _, c := range b.clients {
			_ = c.Close()
		}
	}()
	report := &benchkit.Table{Name: "sdkfleet"}
	report.Add("machine", fmt.Sprintf("%d CPUs, %s", runtime.NumCPU(), runtime.Version()))
	report.Add("fleet", fmt.Sprintf("%d SDK clients in this process, each with its own HTTP/2 connection; pawld in its own process; validator %s", o.clients, o.validator))

	if b.digest, err = benchkit.UploadValidator(ctx, httpClient(), srv.URL, dir, o.validator); err != nil {
		return err
	}

	// Memory: one client, then the rest, each time once all applied
	// generation 1 (a release of one stage for everyone).
	rss0, err := settledRSS()
	if err != nil {
		return err
	}
	compiled := filepath.Join(dir, "compiled") // the process's clients share one validator runtime
	if err := b.start(ctx, 0, 1, compiled); err != nil {
		return err
	}
	if err := b.waitRegistered(ctx, 1); err != nil { // a client registers from its own goroutine
		return err
	}
	if err := b.release(ctx, 1, nil); err != nil {
		return err
	}
	if _, err := b.await(ctx, 1, 1, time.Time{}); err != nil {
		return err
	}
	rss1, _ := settledRSS()
	if err := b.start(ctx, 1, o.clients, compiled); err != nil {
		return err
	}
	if err := b.waitRegistered(ctx, o.clients); err != nil {
		return err
	}
	if err := b.release(ctx, 2, nil); err != nil {
		return err
	}
	if _, err := b.await(ctx, 2, o.clients, time.Time{}); err != nil {
		return err
	}
	rssN, _ := settledRSS()
	if o.memProfile != "" {
		if err := writeHeapProfile(o.memProfile); err != nil {
			return err
		}
	}
	report.Add("resident memory: the process before any client", fmt.Sprintf("%.1f MiB", mib(rss0)))
	report.Add("resident memory added by the first client, just after its apply (validator loaded)", fmt.Sprintf("%.1f MiB", mib(rss1-rss0)))
	report.Add("resident memory added per further client, just after their apply", fmt.Sprintf("%.2f MiB", mib(rssN-rss1)/float64(o.clients-1)))
	// Once the validator has been idle long enough, it is unloaded.
	time.Sleep(o.idleWait)
	rssIdle, _ := settledRSS()
	report.Add(fmt.Sprintf("resident memory of all %d clients after %s without an apply (validator unloaded)", o.clients, o.idleWait),
		fmt.Sprintf("%.1f MiB, %.2f MiB per client", mib(rssIdle-rss0), mib(rssIdle-rss0)/float64(o.clients)))

	// Promote to every client applied.
	if err := b.awaitPassed(ctx, 2); err != nil {
		return err
	}
	if err := b.promote(ctx, 2); err != nil {
		return err
	}
	var p50s, p99s, maxes []time.Duration
	for i := range o.promotions {
		gen := int64(3 + i)
		if err := b.release(ctx, gen, canaryOnly); err != nil {
			return err
		}
		if err := b.awaitPassed(ctx, gen); err != nil {
			return err
		}
		stopProfiles := func() error { return nil }
		if i == 0 && o.profiles != "" {
			if stopProfiles, err = b.startProfiles(ctx, o.profiles); err != nil {
				return err
			}
		}
		if i == 0 && b.phases != nil {
			b.phases.record(gen)
		}
		start := time.Now()
		if err := b.promote(ctx, gen); err != nil {
			return err
		}
		d, err := b.await(ctx, gen, o.clients, start)
		if err := errors.Join(err, stopProfiles()); err != nil {
			return err
		}
		if i == 0 && b.phases != nil {
			b.phases.report(report, start)
		}
		p50s, p99s, maxes = append(p50s, benchkit.Percentile(d, 0.5)), append(p99s, benchkit.Percentile(d, 0.99)), append(maxes, d[len(d)-1])
	}
	report.Add(fmt.Sprintf("Promote to all %d clients applied: p50 over clients, per promotion", o.clients), benchkit.Durations(p50s))
	report.Add("Promote to all clients applied: p99 over clients, per promotion", benchkit.Durations(p99s))
	report.Add("Promote to all clients applied: slowest client, per promotion", benchkit.Durations(maxes))

	// Time to the first applied config, cold and warm.
	cache := filepath.Join(dir, "first-apply-cache")
	for _, kind := range []string{"cold", "warm"} {
		visible, applied, err := b.firstApply(ctx, cache)
		if err != nil {
			return err
		}
		report.Add(fmt.Sprintf("a new client's first config, %s cache: visible, applied from the server's assignment", kind),
			fmt.Sprintf("%s, %s", visible.Round(100*time.Microsecond), applied.Round(100*time.Microsecond)))
	}
	report.Print(os.Stdout)
	return nil
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// settledRSS is this process's resident memory after a garbage
// collection that returned freed memory to the system.
func settledRSS() (int64, error) {
	debug.FreeOSMemory()
	return benchkit.RSS(os.Getpid())
}

// canaryOnly is a plan of one stage: the instance labelled canary=true.
func canaryOnly(spec *pawlv1.ReleaseSpec) {
	spec.Stages = []*pawlv1.Stage{{Name: "canary", Selector: map[string]string{"canary": "true"},
		Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}}}
}

// clientOpts are the clients' options: how they follow the server (a
// session each, or with -unary the older calls) and, with -phases, the
// tracer provider that records their steps.
func (b *bench) clientOpts() []sdk.Option {
	var opts []sdk.Option
	if b.o.unary {
		opts = append(opts, sdk.WithoutSession())
	}
	if b.tracer != nil {
		opts = append(opts, sdk.WithTracerProvider(b.tracer))
	}
	return opts
}

// start starts clients from to to-1, client 0 the canary.
func (b *bench) start(ctx context.Context, from, to int, compiled string) error {
	for i := from; i < to; i++ {
		labels := map[string]string{"fleet": "sdk"}
		if i == 0 {
			labels["canary"] = "true"
		}
		c, err := sdk.New(ctx, b.srv.URL, append(b.clientOpts(), sdk.WithWorkloadIdentity(fmt.Sprintf("sdk-%04d", i)), sdk.WithZone(fmt.Sprintf("zone-%c", 'a'+i%3)),
			sdk.WithLabels(labels), sdk.WithCompiledCacheDir(compiled), sdk.WithLogger(b.clientLog.With("client", i)))...)
		if err != nil {
			return err
		}
		c.OnChange("routing", b.swapped)
		b.clients = append(b.clients, c)
	}
	return nil
}

func (b *bench) swapped(s *sdk.Snapshot) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.applied[s.Generation] = append(b.applied[s.Generation], time.Now())
	close(b.changed)
	b.changed = make(chan struct{})
}

// await waits until n clients swapped generation gen in, and returns how
// long after start each did, sorted.
func (b *bench) await(ctx context.Context, gen int64, n int, start time.Time) ([]time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for {
		b.mu.Lock()
		times, changed := b.applied[gen], b.changed
		b.mu.Unlock()
		if len(times) >= n {
			out := make([]time.Duration, len(times))
			for i, t := range times {
				out[i] = t.Sub(start)
			}
			slices.Sort(out)
			return out, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("generation %d: %d of %d clients applied it: %w%s", gen, len(times), n, ctx.Err(), b.behind(gen))
		}
	}
}

// behind describes (up to ten of) the clients that have not applied gen:
// what each says of itself.
func (b *bench) behind(gen int64) string {
	var out strings.Builder
	shown := 0
	for i, c := range b.clients {
		st := c.Status()
		if st.Configs["routing"].Generation >= gen {
			continue
		}
		if shown++; shown > 10 {
			break
		}
		fmt.Fprintf(&out, "\n  sdk-%04d: %+v", i, st)
	}
	return out.String()
}

func (b *bench) waitRegistered(ctx context.Context, n int) error {
	for deadline := time.Now().Add(2 * time.Minute); ; {
		resp, err := b.is.ListInstances(ctx, connect.NewRequest(&pawlv1.ListInstancesRequest{}))
		if err != nil {
			return err
		}
		live := 0
		for _, r := range resp.Msg.GetInstances() {
			if r.GetLive() {
				live++
			}
		}
		if live >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d clients registered", live, n)
		}
		time.Sleep(50 * time.Millisecond) // registrations come from the clients' own goroutines
	}
}

func (b *bench) release(ctx context.Context, gen int64, edit func(*pawlv1.ReleaseSpec)) error {
	spec := &pawlv1.ReleaseSpec{
		ConfigId: "routing", MediaType: "application/json", ValidatorDigest: b.digest,
		Content:      []byte(fmt.Sprintf(`{"upstreams":[{"host":"a","weight":%d},{"host":"b","weight":%d}]}`, gen, 100-gen)),
		Selector:     map[string]string{"fleet": "sdk"},
		Stages:       []*pawlv1.Stage{{Name: "everyone", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}}},
		Deadline:     durationpb.New(time.Hour),
		HealthWindow: durationpb.New(0),
	}
	if edit != nil {
		edit(spec)
	}
	resp, err := b.rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: spec}))
	if err != nil {
		return err
	}
	if got := resp.Msg.GetRelease().GetGeneration(); got != gen {
		return fmt.Errorf("created generation %d, expected %d", got, gen)
	}
	return nil
}

// awaitPassed waits until the HEALTHY_ACKEDs passed the release's one
// stage.
func (b *bench) awaitPassed(ctx context.Context, gen int64) error {
	for deadline := time.Now().Add(time.Minute); ; {
		st, err := b.ro.GetRolloutStatus(ctx, connect.NewRequest(&pawlv1.GetRolloutStatusRequest{ConfigId: "routing", Generation: gen, AckPageSize: 1}))
		if err != nil {
			return err
		}
		if st.Msg.GetStages()[0].GetOutcome() == "passed" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("generation %d: the stage is %s", gen, st.Msg.GetStages()[0].GetOutcome())
		}
		time.Sleep(10 * time.Millisecond) // the clients report from their own goroutines
	}
}

func (b *bench) promote(ctx context.Context, gen int64) error {
	ptr, err := b.ro.GetPointer(ctx, connect.NewRequest(&pawlv1.GetPointerRequest{ConfigId: "routing"}))
	if err != nil {
		return err
	}
	p := ptr.Msg.GetPointer()
	_, err = b.ro.Promote(ctx, connect.NewRequest(&pawlv1.PromoteRequest{ConfigId: "routing", Generation: gen,
		ExpectedGeneration: p.GetGeneration(), ExpectedEpoch: p.GetEpoch(), IdempotencyKey: fmt.Sprintf("bench-%d", gen)}))
	return err
}

// firstApply starts one more client on cache (its validator runtime its
// own) and returns how long until it had a snapshot of routing, and until
// it applied the server's assignment; then closes it.
func (b *bench) firstApply(ctx context.Context, cache string) (visible, applied time.Duration, err error) {
	start := time.Now()
	c, err := sdk.New(ctx, b.srv.URL, append(b.clientOpts(), sdk.WithWorkloadIdentity("sdk-newcomer"), sdk.WithLabels(map[string]string{"fleet": "sdk"}),
		sdk.WithCacheDir(cache), sdk.WithLogger(b.clientLog.With("client", "newcomer")))...)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	if s := c.Config("routing"); s != nil {
		visible = time.Since(start)
	}
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := c.WaitFor(wait, "routing", func(s *sdk.Snapshot) bool { return !s.FromCache }); err != nil {
		return 0, 0, err
	}
	applied = time.Since(start)
	if visible == 0 {
		visible = applied
	}
	return visible, applied, nil
}

// httpClient is an HTTP/2 (h2c) client for the operator's calls.
func httpClient() connect.HTTPClient {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}

// writeHeapProfile writes this process's heap profile to file.
func writeHeapProfile(file string) error {
	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		_ = f.Close()
		return fmt.Errorf("heap profile: %w", err)
	}
	return f.Close()
}

// startProfiles starts CPU profiles of this process and of pawld (the
// next 30 s) into dir; the function returned stops this process's and
// waits for pawld's.
func (b *bench) startProfiles(ctx context.Context, dir string) (func() error, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(dir, "sdkfleet-promote.cpu.pprof"))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	pawld := make(chan error, 1)
	go func() {
		pawld <- benchkit.SaveProfile(ctx, b.pprofURL+"/debug/pprof/profile?seconds=30", filepath.Join(dir, "pawld-promote.cpu.pprof"))
	}()
	return func() error {
		pprof.StopCPUProfile()
		return errors.Join(f.Close(), <-pawld)
	}, nil
}
