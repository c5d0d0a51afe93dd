// Command httpservice is an example service that reads its configuration
// through the Pawl Go SDK. Each request is pinned to one generation of the
// "greeting" config for its whole length, and calls to a downstream
// service carry the pin, so a chain of services answers from one
// generation or refuses (HTTP 409) rather than mix two.
//
//	go run ./examples/httpservice --identity back-1 --listen 127.0.0.1:8082
//	go run ./examples/httpservice --identity front-1 --listen 127.0.0.1:8081 --downstream http://127.0.0.1:8082
//	curl -s 127.0.0.1:8081/
//
// See README.md in this directory for the whole walk-through.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/pawlcfg/pawl/sdk"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "httpservice:", err)
		os.Exit(1)
	}
}

// greeting is the config this service reads.
type greeting struct {
	Message string `json:"message"`
}

// printSpans prints each span of an apply step as it ends: a stand-in
// for the exporter a real service would configure.
type printSpans struct{ w io.Writer }

func (p printSpans) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (p printSpans) OnEnd(s sdktrace.ReadOnlySpan) {
	if strings.HasPrefix(s.Name(), "pawl.") && !strings.HasPrefix(s.Name(), "pawl.v1.") { // the steps, not the RPCs
		fmt.Fprintf(p.w, "span %s trace %s span %s took %s\n", s.Name(), s.SpanContext().TraceID(), s.SpanContext().SpanID(),
			s.EndTime().Sub(s.StartTime()).Round(time.Microsecond))
	}
}
func (p printSpans) Shutdown(context.Context) error   { return nil }
func (p printSpans) ForceFlush(context.Context) error { return nil }

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("httpservice", flag.ContinueOnError)
	server := fs.String("server", "http://127.0.0.1:7070", "the Pawl server")
	identity := fs.String("identity", "", "this instance's workload identity (required)")
	zone := fs.String("zone", "zone-a", "this instance's zone")
	listen := fs.String("listen", "127.0.0.1:8080", "where to serve")
	downstream := fs.String("downstream", "", "a downstream service to call with the request's pin")
	config := fs.String("config", "greeting", "the config to read")
	cacheDir := fs.String("cache-dir", "", "the SDK's last-known-good cache")
	validatorTimeout := fs.Duration("validator-timeout", time.Second, "time limit of one local validation, the module's start included")
	validatorCache := fs.String("validator-cache", "", "compiled validator modules, which processes on one host may share (default CACHE-DIR/compiled)")
	traces := fs.Bool("trace", true, "trace each apply step and print its spans (their trace IDs are in the ACKs)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *identity == "" {
		return errors.New("--identity is required")
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	opts := []sdk.Option{sdk.WithWorkloadIdentity(*identity), sdk.WithZone(*zone), sdk.WithLogger(log)}
	if *cacheDir != "" {
		opts = append(opts, sdk.WithCacheDir(*cacheDir))
	}
	opts = append(opts, sdk.WithValidatorTimeout(*validatorTimeout))
	if *validatorCache != "" {
		opts = append(opts, sdk.WithCompiledCacheDir(*validatorCache))
	}
	if *traces {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(printSpans{stdout}))
		defer tp.Shutdown(context.Background())
		opts = append(opts, sdk.WithTracerProvider(tp))
	}
	client, err := sdk.New(ctx, *server, opts...)
	if err != nil {
		return err
	}
	defer client.Close()
	client.OnChange(*config, func(s *sdk.Snapshot) {
		fmt.Fprintf(stdout, "applied %s generation %d\n", s.Config, s.Generation)
	})

	calls := &http.Client{Transport: sdk.PinTransport(nil), Timeout: 10 * time.Second}
	defer calls.CloseIdleConnections()
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s := sdk.Pinned(r.Context(), *config)
		if s == nil {
			http.Error(w, fmt.Sprintf("%s has no %s config yet", *identity, *config), http.StatusServiceUnavailable)
			return
		}
		g, err := sdk.JSON[greeting](s)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		answer := fmt.Sprintf("%s: %s (%s generation %d)\n", *identity, g.Message, s.Config, s.Generation)
		if *downstream != "" {
			req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, *downstream+"/", nil)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			resp, err := calls.Do(req)
			if err != nil {
				http.Error(w, "downstream: "+err.Error(), http.StatusBadGateway)
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				// A downstream without our generation refuses: so do we.
				http.Error(w, fmt.Sprintf("%sdownstream refused (%d): %s", answer, resp.StatusCode, body), resp.StatusCode)
				return
			}
			answer += string(body)
		}
		fmt.Fprint(w, answer)
	})

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: client.Middleware(mux), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "listening on %s\n", ln.Addr())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
		<-done
		return nil
	case err := <-done:
		return err
	}
}
