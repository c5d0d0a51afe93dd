// Package console serves the operator console, a single-page web app built
// from console/ (TypeScript, bundled by esbuild) into dist/ and embedded in
// pawld: the console calls pawld's own Connect API from the browser,
// same-origin, so it needs no CORS and the server's auth interceptor
// authorizes every call it makes, as it does the CLI's.
//
// Rebuild dist/ with `go tool -modfile=tools/go.mod task console`; a test
// fails when the committed bundle does not match the sources.
package console

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

// Path is where pawld mounts the console; a request for /ui is redirected
// to it by http.ServeMux.
const Path = "/ui/"

// CSP is the Content-Security-Policy of every console response: scripts,
// styles and API calls from pawld's own origin only; no inline code, no
// frames, no plugins.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

//go:embed dist
var dist embed.FS

// types are the content types of the files dist holds, by extension; any
// other file is not served.
var types = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
}

// Handler serves the console under Path: index.html for Path itself, and
// the bundle's files by name, each with its content type, the CSP and
// headers that keep browsers from sniffing, framing or caching stale
// copies. Anything else is 404; methods other than GET and HEAD are 405.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hdr := w.Header()
		hdr.Set("Content-Security-Policy", CSP)
		hdr.Set("X-Content-Type-Options", "nosniff")
		hdr.Set("X-Frame-Options", "DENY")
		hdr.Set("Referrer-Policy", "no-referrer")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			hdr.Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		name := strings.TrimPrefix(r.URL.Path, Path)
		if name == "" {
			name = "index.html"
		}
		ctype, ok := types[path.Ext(name)]
		if !ok || strings.Contains(name, "/") {
			http.NotFound(w, r)
			return
		}
		body, err := File(name)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		hdr.Set("Content-Type", ctype)
		// The bundle changes with pawld: revalidate on every load.
		hdr.Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodGet {
			_, _ = w.Write(body)
		}
	})
}

// File returns one embedded file of the bundle, by name.
func File(name string) ([]byte, error) {
	return fs.ReadFile(dist, path.Join("dist", name))
}
