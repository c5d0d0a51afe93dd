package server

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"

	connectcors "connectrpc.com/cors"
	"github.com/rs/cors"
)

// WithCORSOrigins lets pages of these origins call the API from a browser
// (Connect and gRPC-Web): each origin exact, as a browser sends it
// (scheme://host[:port], no path), or "*" alone for every origin. Off by
// default: a browser then refuses every cross-origin call, and the
// console at /ui, being same-origin, needs none. Listed origins may send
// credentials (a client certificate); "*" may not.
func WithCORSOrigins(origins ...string) Option {
	return func(c *config) { c.corsOrigins = slices.Clone(origins) }
}

// corsHeaders are the request headers a page may send: Connect's and
// gRPC-Web's, a bearer token, the actor of a change and the W3C trace
// context.
var corsHeaders = append(connectcors.AllowedHeaders(), "Authorization", "Pawl-Actor", "Traceparent", "Tracestate")

// corsMaxAge is how long, in seconds, a browser may keep a preflight's
// answer: two hours, the most Chromium keeps.
const corsMaxAge = 7200

// checkCORSOrigins reports the first origin that is not one a browser
// sends, or "*" beside others.
func checkCORSOrigins(origins []string) error {
	for _, o := range origins {
		if o == "*" {
			if len(origins) > 1 {
				return fmt.Errorf("server: WithCORSOrigins(%q): \"*\" allows every origin and must stand alone", origins)
			}
			continue
		}
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
			u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
			return fmt.Errorf("server: WithCORSOrigins: %q is not an origin: want scheme://host[:port] as a browser sends it, "+
				"such as https://console.example.com, or \"*\" alone", o)
		}
	}
	return nil
}

// withCORS answers browsers' preflights and marks the answers the listed
// origins may read; without origins it is next itself. A preflight from
// another origin gets no Access-Control-Allow-Origin, so the browser
// refuses the call.
func withCORS(next http.Handler, origins []string) http.Handler {
	if len(origins) == 0 {
		return next
	}
	return cors.New(cors.Options{
		AllowedOrigins:   origins,
		AllowedMethods:   connectcors.AllowedMethods(),
		AllowedHeaders:   corsHeaders,
		ExposedHeaders:   connectcors.ExposedHeaders(),
		AllowCredentials: !slices.Contains(origins, "*"),
		MaxAge:           corsMaxAge,
	}).Handler(next)
}
