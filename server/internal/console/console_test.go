package console_test

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/server/internal/console"
)

// TestServesTheEmbeddedConsole: a real server serves the console under
// /ui/ with each file's content type and a same-origin-only CSP, redirects
// /ui to it, and serves nothing else from there.
func TestServesTheEmbeddedConsole(t *testing.T) {
	srv := testserver.Start(t)
	client := testserver.HTTP1Client(t)
	get := func(method, path string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(body)
	}
	for path, want := range map[string]struct{ ctype, contains string }{
		"/ui/":           {"text/html; charset=utf-8", `<script type="module" src="app.js">`},
		"/ui/index.html": {"text/html; charset=utf-8", "<title>Pawl console</title>"},
		"/ui/app.js":     {"text/javascript; charset=utf-8", "Bearer "},
		"/ui/app.css":    {"text/css; charset=utf-8", ".pager"},
	} {
		resp, body := get(http.MethodGet, path)
		h := resp.Header
		if resp.StatusCode != http.StatusOK || h.Get("Content-Type") != want.ctype || !strings.Contains(body, want.contains) {
			t.Errorf("GET %s = %d %q (%d bytes); want 200 %q containing %q", path, resp.StatusCode, h.Get("Content-Type"), len(body), want.ctype, want.contains)
		}
		csp := h.Get("Content-Security-Policy")
		for _, directive := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
			if !strings.Contains(csp, directive) {
				t.Errorf("GET %s: Content-Security-Policy %q lacks %q", path, csp, directive)
			}
		}
		if strings.Contains(csp, "unsafe") || strings.Contains(csp, "*") || strings.Contains(csp, "http") {
			t.Errorf("GET %s: Content-Security-Policy %q allows more than the console's own origin", path, csp)
		}
		if h.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: X-Content-Type-Options = %q", path, h.Get("X-Content-Type-Options"))
		}
	}
	// The page has no inline script or style, which the CSP would block.
	if _, body := get(http.MethodGet, "/ui/"); strings.Contains(body, "<script>") || strings.Contains(body, "style=") || strings.Contains(body, "<style") {
		t.Errorf("index.html has inline code the CSP blocks:\n%s", body)
	}
	noRedirect := *client
	noRedirect.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := noRedirect.Get(srv.URL + "/ui")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 3 || resp.Header.Get("Location") != "/ui/" {
		t.Errorf("GET /ui = %d to %q; want a redirect to /ui/", resp.StatusCode, resp.Header.Get("Location"))
	}
	for _, path := range []string{"/ui/missing.js", "/ui/../go.mod", "/ui/dist/app.js", "/ui/favicon.ico"} {
		if resp, _ := get(http.MethodGet, path); resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s = %d; want 404", path, resp.StatusCode)
		}
	}
	if resp, _ := get(http.MethodPost, "/ui/"); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /ui/ = %d; want 405", resp.StatusCode)
	}
	if resp, body := get(http.MethodHead, "/ui/app.js"); resp.StatusCode != http.StatusOK || body != "" {
		t.Errorf("HEAD /ui/app.js = %d with %d bytes", resp.StatusCode, len(body))
	}
}

// root is the repository's root directory.
func root(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// needJS skips the test when node or the npm dependencies are missing,
// except in CI (CI=true), where their absence fails it.
func needJS(t *testing.T, extra ...string) {
	t.Helper()
	missing := []string{}
	if _, err := exec.LookPath("node"); err != nil {
		missing = append(missing, "node")
	}
	for _, p := range append([]string{filepath.Join(root(t), "node_modules", "esbuild")}, extra...) {
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, p)
		}
	}
	if len(missing) == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("missing %v (run npm ci; .ci/run installs them)", missing)
	}
	t.Skipf("missing %v (run npm ci)", missing)
}

// TestTheCommittedBundleMatchesTheSources: building console/ again gives
// exactly the files embedded in pawld (run `task console` after editing
// console/ and commit server/internal/console/dist).
func TestTheCommittedBundleMatchesTheSources(t *testing.T) {
	needJS(t)
	out := t.TempDir()
	cmd := exec.Command("node", filepath.Join("console", "build.mjs"), out)
	cmd.Dir = root(t)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("node console/build.mjs: %v\n%s", err, b)
	}
	for _, name := range []string{"index.html", "app.js", "app.css"} {
		built, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		embedded, err := console.File(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(built, embedded) {
			t.Errorf("server/internal/console/dist/%s (%d bytes) is not what console/ builds (%d bytes): run `go tool -modfile=tools/go.mod task console` and commit it", name, len(embedded), len(built))
		}
	}
	entries, err := os.ReadDir(filepath.Join(root(t), "server", "internal", "console", "dist"))
	if err != nil || len(entries) != 3 {
		t.Errorf("dist holds %d files (%v); want index.html, app.js and app.css only", len(entries), err)
	}
}
