package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"
)

// checkListen refuses an address beyond loopback: the endpoint serves
// every config and key the agent holds, without authentication.
func checkListen(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--listen %q is not HOST:PORT: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--listen %q must be a loopback address such as 127.0.0.1:2772: the endpoint has no authentication", addr)
	}
	return nil
}

// handler serves the snapshot the files hold, and readiness:
//
//	GET /v1/configs/ID  the config as written to DIR/configs/ID (404 if none)
//	GET /v1/kv/KEY      the key /KEY, under --prefix (404 if none)
//	GET /ready          200 once the initial sync is written, 503 before
//	GET /healthz        200 while the agent runs
func (a *agent) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/configs/{id}", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		s := a.configs[r.PathValue("id")]
		a.mu.Unlock()
		if s == nil {
			http.Error(w, "no snapshot of config "+strconv.Quote(r.PathValue("id")), http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", s.MediaType)
		w.Header().Set("Pawl-Generation", strconv.FormatInt(s.Generation, 10))
		w.Header().Set("Pawl-Content-Digest", s.ContentDigest)
		_, _ = w.Write(s.Content)
	})
	mux.HandleFunc("GET /v1/kv/{key...}", func(w http.ResponseWriter, r *http.Request) {
		key := "/" + r.PathValue("key")
		if a.space == nil || len(key) <= len(a.o.prefix) || key[:len(a.o.prefix)] != a.o.prefix {
			http.Error(w, fmt.Sprintf("key %q is not under --prefix %q", key, a.o.prefix), http.StatusNotFound)
			return
		}
		e, ok := a.space.Get(key)
		if !ok {
			http.Error(w, fmt.Sprintf("no key %q", key), http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Pawl-Mod-Revision", strconv.FormatInt(e.ModRevision, 10))
		_, _ = w.Write(e.Value)
	})
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, r *http.Request) {
		if why := a.notReady(); why != "" {
			http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
			return
		}
		_, _ = fmt.Fprintln(w, "ready")
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprintln(w, "ok")
	})
	return mux
}

// serve serves the endpoint on ln until ctx ends.
func (a *agent) serve(ctx context.Context, ln net.Listener) {
	srv := &http.Server{Handler: a.handler(), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		a.log.Warn("--listen: the endpoint stopped", "error", err)
	}
	<-done
}
