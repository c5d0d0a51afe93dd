package sdk_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/pawlcfg/pawl/internal/testkit/faultproxy"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/sdk"
)

// downloads counts the module downloads a client starts and how many of
// their bodies ended in an error.
type downloads struct {
	base   http.RoundTripper
	mu     sync.Mutex
	starts int
	broken int
}

func (d *downloads) RoundTrip(r *http.Request) (*http.Response, error) {
	if !strings.HasSuffix(r.URL.Path, "/Download") {
		return d.base.RoundTrip(r)
	}
	d.mu.Lock()
	d.starts++
	d.mu.Unlock()
	resp, err := d.base.RoundTrip(r)
	if err != nil {
		d.mu.Lock()
		d.broken++
		d.mu.Unlock()
		return nil, err
	}
	resp.Body = &watchedBody{ReadCloser: resp.Body, d: d}
	return resp, nil
}

type watchedBody struct {
	io.ReadCloser
	d      *downloads
	failed bool
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF && !b.failed {
		b.failed = true
		b.d.mu.Lock()
		b.d.broken++
		b.d.mu.Unlock()
	}
	return n, err
}

// TestTheServerRestartsMidDownload: the connection is cut in the middle
// of the validator module's download and the server restarts (same data,
// same address); the client retries, downloads it whole, applies and
// reports, under its registration that survived the restart.
func TestTheServerRestartsMidDownload(t *testing.T) {
	h := newHarness(t)
	dir, addr := h.srv.DataDir, h.srv.Addr
	proxy := faultproxy.NewHolder(t, addr)
	d := &downloads{base: testserver.HTTPClient(t).Transport}
	c := h.clientAt("http://"+proxy.Addr, "i0", sdk.WithHTTPClient(&http.Client{Transport: d}))
	h.waitRegistered("i0")

	cut := proxy.CutAfter(256 << 10) // a quarter of the way into the module (3.3 MB, about 950 kB compressed)
	h.release(50, nil)
	<-cut
	h.srv.Stop()
	h.connect(testserver.StartAt(t, dir, addr))
	proxy.Heal()

	has(t, c, 1)
	states := h.awaitAcks(1, func(s map[string][]string) bool { return reported(s, "i0", "HEALTHY_ACKED") })
	if strings.Join(states["i0"], ",") != strings.Join(everyStep, ",") {
		t.Fatalf("reported %v", states["i0"])
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.starts < 2 || d.broken < 1 {
		t.Fatalf("%d downloads started, %d broken: the cut did not land in a download", d.starts, d.broken)
	}
}

// TestAClientStartsFromItsCacheWhileTheServerIsDown: with the server
// stopped, a new process starts from the last known good snapshot,
// verified by digest; a cached release whose bytes were changed on disk
// is not used.
func TestAClientStartsFromItsCacheWhileTheServerIsDown(t *testing.T) {
	h := newHarness(t)
	cache := t.TempDir()
	c := h.client("i0", sdk.WithCacheDir(cache))
	h.waitRegistered("i0")
	h.release(50, nil)
	want := has(t, c, 1)
	h.awaitAcks(1, func(s map[string][]string) bool { return reported(s, "i0", "HEALTHY_ACKED") })
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	h.srv.Stop()

	restarted := h.client("i0", sdk.WithCacheDir(cache))
	s := restarted.Config("routing")
	if s == nil || !s.FromCache || s.Generation != 1 || s.ContentDigest != want.ContentDigest || string(s.Content) != string(want.Content) {
		t.Fatalf("started from the cache with %+v", s)
	}
	ctx := restarted.Pin(context.Background())
	if v, err := sdk.JSON[table](sdk.Pinned(ctx, "routing")); err != nil || v.Upstreams[0].Weight != 50 {
		t.Fatalf("reading the cached snapshot: %+v, %v", v, err)
	}
	if err := restarted.Close(); err != nil {
		t.Fatal(err)
	}

	// Change the cached content on disk: the digest no longer matches.
	rewriteCached(t, cache, func(rec map[string]any) {
		rec["content"] = []byte(`{"upstreams":[{"host":"evil","weight":100}]}`)
	})
	tampered := h.client("i0", sdk.WithCacheDir(cache))
	if s := tampered.Config("routing"); s != nil {
		t.Fatalf("a cache changed on disk was used: %+v", s)
	}
}
