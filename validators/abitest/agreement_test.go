package abitest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/internal/testkit/wasmbuild"
	"github.com/pawlcfg/pawl/sdk"
	"github.com/pawlcfg/pawl/sdk/canonical"
	"github.com/pawlcfg/pawl/server"
	"github.com/pawlcfg/pawl/validators/abi"
	"github.com/pawlcfg/pawl/validators/abitest"
	"github.com/pawlcfg/pawl/validators/host"
)

// TestServerAndSDKReachTheKitsVerdicts runs every case of every example
// module, in every language, three ways: in the kit; on a real pawld, as a dry run (Validate)
// and as a release (CreateRelease refuses an invalid one with its
// violations); and in the SDK, which applies each valid case's release
// from the server, and revalidates each case from its cache as it does at
// start, serving the valid ones and refusing the others. All three reach
// the same verdict and, where they report them, the same violations.
func TestServerAndSDKReachTheKitsVerdicts(t *testing.T) {
	for _, ex := range examples {
		t.Run(ex.name, func(t *testing.T) {
			agree(t, ex.build(t, ex.name), filepath.Join(wasmbuild.Examples(), ex.cases, "cases"))
		})
	}
}

// configID is the config a case is released as; the kit runs the case
// with it as the config name, as a release passes it.
func configID(c abitest.Case) string {
	if c.Input.Name != "" {
		return c.Input.Name
	}
	return "kit." + c.Name
}

func agree(t *testing.T, wasm []byte, casesDir string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cases, err := abitest.LoadCases(casesDir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range cases {
		cases[i].Input.Name = configID(cases[i])
	}
	rep, err := abitest.Run(ctx, wasm, abitest.WithCases(cases...), abitest.WithCacheDir(wasmbuild.CacheDir(t)),
		abitest.WithCompileTimeout(wasmbuild.CompileTimeout), abitest.WithTimeout(loadedTimeout))
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("the kit fails the module:%s", describe(rep))
	}
	kit := map[string]host.Result{}
	for _, c := range cases {
		check, _ := rep.Find(abitest.CasePrefix + c.Name)
		kit[c.Name] = *check.Result
	}

	srv := testserver.Start(t, server.WithValidatorTimeout(loadedTimeout))
	httpClient := testserver.HTTPClient(t)
	vs := pawlv1connect.NewValidatorServiceClient(httpClient, srv.URL)
	rs := pawlv1connect.NewReleaseServiceClient(httpClient, srv.URL)
	up, err := vs.Upload(ctx, connect.NewRequest(&pawlv1.UploadRequest{Wasm: wasm, Name: "kit"}))
	if err != nil {
		t.Fatal(err)
	}
	digest := up.Msg.GetValidator().GetDigest()

	cache := t.TempDir()
	client := startClient(t, ctx, srv.URL, cache, nil)
	awaitUp(t, ctx, client)
	var base string // a valid case, applied by the client, whose cache entry the offline check copies
	for _, c := range cases {
		want := redacted(c, kit[c.Name])
		dry, err := vs.Validate(ctx, connect.NewRequest(&pawlv1.ValidateRequest{
			Digest: digest, Content: c.Input.Config, MediaType: c.Input.MediaType, ConfigName: c.Input.Name, Params: c.Input.Params,
		}))
		if err != nil {
			t.Fatalf("case %s: dry run: %v", c.Name, err)
		}
		if got := fromProto(dry.Msg.GetViolations()); dry.Msg.GetValid() != want.Valid || !reflect.DeepEqual(got, want.Violations) {
			t.Errorf("case %s: the server's dry run says %v %+v; the kit %v %+v", c.Name, dry.Msg.GetValid(), got, want.Valid, want.Violations)
		}
		_, err = rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: &pawlv1.ReleaseSpec{
			ConfigId: c.Input.Name, MediaType: c.Input.MediaType, ValidatorDigest: digest, Content: c.Input.Config, ValidatorParams: c.Input.Params,
			Stages:       []*pawlv1.Stage{{Name: "everyone", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}}},
			HealthWindow: durationpb.New(10 * time.Millisecond), Deadline: durationpb.New(time.Hour),
		}}))
		var rejected *pawlv1.ReleaseRejected
		switch {
		case want.Valid && err != nil:
			t.Errorf("case %s: the server refuses the release of content the kit finds valid: %v", c.Name, err)
		case !want.Valid && err == nil:
			t.Errorf("case %s: the server releases content the kit finds invalid", c.Name)
		case !want.Valid && !rejectedDetail(err, &rejected):
			t.Errorf("case %s: the server refuses the release without its violations: %v", c.Name, err)
		case !want.Valid && !reflect.DeepEqual(fromProto(rejected.GetViolations()), want.Violations):
			t.Errorf("case %s: the server refuses the release with %+v; the kit finds %+v", c.Name, fromProto(rejected.GetViolations()), want.Violations)
		case want.Valid:
			// The SDK downloads, verifies and validates the release,
			// and applies it.
			wctx, cancel := context.WithTimeout(ctx, time.Minute)
			s, err := client.Wait(wctx, c.Input.Name)
			cancel()
			if err != nil || string(s.Content) != string(c.Input.Config) {
				t.Fatalf("case %s: the SDK did not apply the valid release: %v", c.Name, err)
			}
			base = c.Input.Name
		}
	}
	if base == "" {
		t.Fatal("no valid case: the SDK's cache cannot be seeded")
	}
	if err := client.Close(); err != nil {
		t.Fatal(err)
	}

	// Every case as a cached release: the SDK revalidates each before it
	// serves it, and logs why it refuses one.
	offline := t.TempDir()
	for _, c := range cases {
		cacheRelease(t, cache, offline, base, c)
	}
	logs := &warnings{}
	// No server: the client starts from its cache alone.
	client = startClient(t, ctx, "http://127.0.0.1:1", offline, logs)
	for _, c := range cases {
		want := redacted(c, kit[c.Name])
		s := client.Config(c.Input.Name)
		reason := logs.errorOf(c.Input.Name)
		switch {
		case want.Valid && (s == nil || string(s.Content) != string(c.Input.Config)):
			t.Errorf("case %s: the SDK does not serve from its cache content the kit finds valid (%s)", c.Name, reason)
		case !want.Valid && s != nil:
			t.Errorf("case %s: the SDK serves from its cache content the kit finds invalid", c.Name)
		case !want.Valid && reason != sdkReason(want.Violations):
			t.Errorf("case %s: the SDK refuses it with\n\t%s\nthe kit's violations make\n\t%s", c.Name, reason, sdkReason(want.Violations))
		}
	}
}

// startClient starts an SDK client with cache dir, whose warnings go to
// logs (if not nil); the test's end closes it.
func startClient(t *testing.T, ctx context.Context, url, dir string, logs *warnings, opts ...sdk.Option) *sdk.Client {
	t.Helper()
	var handler slog.Handler = slog.DiscardHandler
	if logs != nil {
		handler = logs
	}
	c, err := sdk.New(ctx, url, append([]sdk.Option{
		sdk.WithWorkloadIdentity("kit-0"), sdk.WithZone("zone-a"), sdk.WithAppVersion("1.0.0"),
		sdk.WithCacheDir(dir), sdk.WithCompiledCacheDir(wasmbuild.CacheDir(t)), sdk.WithLogger(slog.New(handler)),
		sdk.WithBackoff(10*time.Millisecond, 200*time.Millisecond), sdk.WithValidatorTimeout(loadedTimeout),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// awaitUp waits until the client's assignment stream is open: it is then
// registered, and in the membership of the releases to come.
func awaitUp(t *testing.T, ctx context.Context, c *sdk.Client) {
	t.Helper()
	up := make(chan struct{})
	var once sync.Once
	stop := c.OnConnection(func(conn sdk.Connection) {
		if conn.Up {
			once.Do(func() { close(up) })
		}
	})
	defer stop()
	if c.Connection().Up {
		return
	}
	select {
	case <-up:
	case <-ctx.Done():
		t.Fatal("the SDK client never connected")
	}
}

// cacheRelease writes case c into the cache dir to as the SDK's cache
// holds an applied release: the cached release of config base in from,
// with c's config, content and its digest, media type and params.
func cacheRelease(t *testing.T, from, to, base string, c abitest.Case) {
	t.Helper()
	copyFile := func(src, dst string, edit func(map[string]any)) {
		b, err := os.ReadFile(filepath.Join(from, src))
		if err != nil {
			t.Fatal(err)
		}
		if edit != nil {
			var rec map[string]any
			if err := json.Unmarshal(b, &rec); err != nil {
				t.Fatal(err)
			}
			edit(rec)
			if b, err = json.Marshal(rec); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.MkdirAll(filepath.Join(to, filepath.Dir(dst)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, dst), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	modules, err := filepath.Glob(filepath.Join(from, "validators", "*.wasm"))
	if err != nil || len(modules) != 1 {
		t.Fatalf("the cache holds modules %q (%v); want one", modules, err)
	}
	copyFile(filepath.Join("validators", filepath.Base(modules[0])), filepath.Join("validators", filepath.Base(modules[0])), nil)
	copyFile(filepath.Join("applied", base+".json"), filepath.Join("applied", c.Input.Name+".json"), nil)
	digest, err := canonicalDigest(c.Input.MediaType, c.Input.Config)
	if err != nil {
		t.Fatal(err)
	}
	copyFile(filepath.Join("releases", base, "1.json"), filepath.Join("releases", c.Input.Name, "1.json"), func(rec map[string]any) {
		rec["config"], rec["content"], rec["content_digest"], rec["media_type"] = c.Input.Name, c.Input.Config, digest, c.Input.MediaType
		delete(rec, "params")
		if c.Input.Params != nil {
			rec["params"] = c.Input.Params
		}
	})
}

// redacted is the kit's result as server and SDK report it: without the
// values the module marked secret.
func redacted(c abitest.Case, res host.Result) host.Result {
	res.Violations = host.RedactViolations(res.Violations, host.SecretValues(c.Input.Config, res.Secrets))
	return res
}

func fromProto(vs []*pawlv1.Violation) []abi.Violation {
	out := []abi.Violation{}
	for _, v := range vs {
		sev := abi.SeverityError
		if v.GetSeverity() == pawlv1.Severity_SEVERITY_WARNING {
			sev = abi.SeverityWarning
		}
		out = append(out, abi.Violation{Path: v.GetPath(), Message: v.GetMessage(), Severity: sev})
	}
	return out
}

func rejectedDetail(err error, out **pawlv1.ReleaseRejected) bool {
	var cerr *connect.Error
	if !errors.As(err, &cerr) {
		return false
	}
	for _, d := range cerr.Details() {
		if v, err := d.Value(); err == nil {
			if r, ok := v.(*pawlv1.ReleaseRejected); ok {
				*out = r
				return true
			}
		}
	}
	return false
}

// sdkReason is the reason the SDK gives for content its validator refuses
// with violations vs.
func sdkReason(vs []abi.Violation) string {
	var b strings.Builder
	b.WriteString("the validator rejected the content:")
	for _, v := range vs {
		fmt.Fprintf(&b, " [%s] %s: %s;", v.Severity, v.Path, v.Message)
	}
	return strings.TrimSuffix(b.String(), ";")
}

// warnings is a slog handler that keeps the error of each warning, by the
// config it names.
type warnings struct {
	mu     sync.Mutex
	errors map[string]string
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	var config, msg string
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "config":
			config = a.Value.String()
		case "error":
			msg = a.Value.String()
		}
		return true
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.errors == nil {
		w.errors = map[string]string{}
	}
	w.errors[config] = msg
	return nil
}

func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }

func (w *warnings) errorOf(config string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.errors[config]
}

func canonicalDigest(mediaType string, content []byte) (string, error) {
	return canonical.Digest(mediaType, content)
}
