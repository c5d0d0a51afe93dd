package sdk_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/internal/testkit/faultproxy"
	"github.com/pawlcfg/pawl/sdk"
	"github.com/pawlcfg/pawl/sdk/canonical"
)

// logSignal is a slog handler that closes a channel at the first record
// whose message contains want.
type logSignal struct {
	want string
	once *sync.Once
	seen chan struct{}
}

func newLogSignal(want string) logSignal {
	return logSignal{want: want, once: &sync.Once{}, seen: make(chan struct{})}
}

func (l logSignal) Enabled(context.Context, slog.Level) bool { return true }
func (l logSignal) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l logSignal) WithGroup(string) slog.Handler            { return l }
func (l logSignal) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, l.want) {
		l.once.Do(func() { close(l.seen) })
	}
	return nil
}

// filesUnder lists every file under dir, relative to it.
func filesUnder(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	if err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, path)
			out = append(out, rel)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAManInTheMiddleCannotRenameAConfigOutOfTheCache: on a plain http://
// link, a proxy renames config "routing" to "../../../escape" in every
// answer (and back in every request, so the server plays along). The
// client refuses the assignment before the name is used: nothing is
// written outside its cache directory, and nothing is applied.
func TestAManInTheMiddleCannotRenameAConfigOutOfTheCache(t *testing.T) {
	h := newHarness(t)
	const fake = "../../../escape"
	mitm := faultproxy.NewRewriter(t, h.srv.URL, faultproxy.Rename("routing", fake))
	base := t.TempDir()
	cache := filepath.Join(base, "a", "b", "cache")
	refused := newLogSignal("refused an assignment")
	c := h.clientAt(mitm.URL, "i0", sdk.WithCacheDir(cache), sdk.WithLogger(slog.New(refused)))
	h.waitRegistered("i0")
	h.release(50, nil)

	// Today's client would apply the renamed config; this one refuses it.
	ctx, cancel := context.WithTimeout(h.ctx, time.Minute)
	defer cancel()
	applied := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := c.Wait(ctx, fake); err == nil {
			close(applied)
		}
	}()
	select {
	case <-refused.seen:
	case <-applied:
		t.Error("the renamed config was applied")
	case <-ctx.Done():
		t.Error("the renamed assignment was neither refused nor applied")
	}
	cancel()
	wg.Wait()
	for _, f := range filesUnder(t, base) {
		if !strings.HasPrefix(f, filepath.Join("a", "b", "cache")+string(filepath.Separator)) {
			t.Errorf("written outside the cache: %s", f)
		}
	}
	if len(c.Configs()) != 0 {
		t.Fatalf("applied %v", c.Configs())
	}
}

// poison rewrites the cached release of routing generation 1 with content
// and the content's own digest, as whoever can write the cache can.
func poison(t *testing.T, cache string, content []byte) {
	t.Helper()
	digest, err := canonical.Digest("application/json", content)
	if err != nil {
		t.Fatal(err)
	}
	rewriteCached(t, cache, func(rec map[string]any) { rec["content"], rec["content_digest"] = content, digest })
}

// rewriteCached changes the cached release of routing generation 1 on
// disk with edit.
func rewriteCached(t *testing.T, cache string, edit func(rec map[string]any)) {
	t.Helper()
	path := filepath.Join(cache, "releases", "routing", "1.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	edit(rec)
	if b, err = json.Marshal(rec); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestAPoisonedCacheIsNeverTrusted: the cache keeps its files 0600 in
// directories 0700. A cached release rewritten together with its digest
// is, with the server up, dropped and downloaded again: the instance ends
// on the real release and reports no REJECTED. With the server down, a
// rewrite its validator refuses is not served (the config waits for the
// server), and is dropped.
func TestAPoisonedCacheIsNeverTrusted(t *testing.T) {
	h := newHarness(t)
	cache := t.TempDir()
	first := h.client("i0", sdk.WithCacheDir(cache))
	h.waitRegistered("i0")
	rel := h.release(50, nil)
	want := has(t, first, 1)
	h.awaitAcks(1, func(s map[string][]string) bool { return reported(s, "i0", "HEALTHY_ACKED") })
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if err := filepath.WalkDir(cache, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if wantMode := map[bool]os.FileMode{true: 0o700, false: 0o600}[d.IsDir()]; fi.Mode().Perm() != wantMode {
			t.Errorf("%s has mode %v, want %v", path, fi.Mode().Perm(), wantMode)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	t.Run("online", func(t *testing.T) {
		// Valid content: only the assignment's digest tells it apart.
		poison(t, cache, []byte(`{"upstreams":[{"host":"evil","weight":100}]}`))
		// The cached copy is dropped as soon as it is seen not to match,
		// not taken for a corrupt download, which would cost tries.
		retried := newLogSignal("downloading again")
		second := h.client("i0", sdk.WithCacheDir(cache), sdk.WithLogger(slog.New(retried)))
		s, err := second.WaitFor(h.ctx, "routing", func(s *sdk.Snapshot) bool { return !s.FromCache })
		if err != nil {
			t.Fatal(err)
		}
		if s.ContentDigest != rel.GetContentDigest() || string(s.Content) != string(want.Content) {
			t.Fatalf("applied %s with %q; want the release's %s", s, s.Content, rel.GetContentDigest())
		}
		if states := h.awaitBootHealthy(1, second.BootID()); !slices.Equal(states, everyStep) {
			t.Fatalf("the restarted instance reported %v; want %v", states, everyStep)
		}
		b, err := os.ReadFile(filepath.Join(cache, "releases", "routing", "1.json"))
		if err != nil || !strings.Contains(string(b), rel.GetContentDigest()) {
			t.Fatalf("the cache holds %.200s, %v; want the release downloaded again", b, err)
		}
		if err := second.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-retried.seen:
			t.Fatal("the cached copy was verified as a download, and downloaded again as a corrupt one")
		default:
		}
	})

	t.Run("offline", func(t *testing.T) {
		// Content the routing validator refuses: its weights sum to 1.
		poison(t, cache, []byte(`{"upstreams":[{"host":"evil","weight":1}]}`))
		h.srv.Stop()
		third := h.client("i0", sdk.WithCacheDir(cache))
		if s := third.Config("routing"); s != nil {
			t.Fatalf("served %s (%q) from a cache that its validator refuses", s, s.Content)
		}
		if _, err := os.Stat(filepath.Join(cache, "releases", "routing", "1.json")); !os.IsNotExist(err) {
			t.Fatalf("the refused release is still cached: %v", err)
		}
	})
}

// TestATransientlyCorruptDownloadIsDownloadedAgain: a proxy corrupts the
// content of the first two copies of the release the client gets (the
// one its session sends inline with the assignment, then its first
// download); the client downloads again (with backoff), and the release
// ends APPLIED and HEALTHY_ACKED, with no REJECTED.
func TestATransientlyCorruptDownloadIsDownloadedAgain(t *testing.T) {
	h := newHarness(t)
	var mu sync.Mutex
	corrupted := map[string]int{} // by how the copy came: inline, download
	mitm := faultproxy.NewRewriter(t, h.srv.URL, func(procedure string, msg proto.Message, request bool) {
		var rels []*pawlv1.Release
		how := "download"
		switch m := msg.(type) {
		case *pawlv1.GetReleaseResponse:
			rels = append(rels, m.GetRelease())
		case *pawlv1.SessionResponse:
			rels, how = m.GetReleases(), "inline"
		}
		mu.Lock()
		defer mu.Unlock()
		for _, rel := range rels {
			if corrupted["inline"]+corrupted["download"] < 2 {
				corrupted[how]++
				c := rel.GetSpec().GetContent()
				i := strings.IndexAny(string(c), "0123456789")
				c[i] = '0' + (c[i]-'0'+1)%10
			}
		}
	})
	c := h.clientAt(mitm.URL, "i0")
	h.waitRegistered("i0")
	h.release(50, nil)
	states := h.awaitAcks(1, func(s map[string][]string) bool {
		return reported(s, "i0", "HEALTHY_ACKED") || reported(s, "i0", "REJECTED")
	})
	if !slices.Equal(states["i0"], everyStep) {
		t.Fatalf("reported %v; want %v", states["i0"], everyStep)
	}
	has(t, c, 1)
	mu.Lock()
	defer mu.Unlock()
	if corrupted["inline"] != 1 || corrupted["download"] != 1 {
		t.Fatalf("copies corrupted: %v; want the inline one, then a download", corrupted)
	}
}
