package api_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/server/internal/api"
	"github.com/pawlcfg/pawl/server/internal/metrics"
)

// BenchmarkObservedCall measures what the metrics interceptor, and the
// tracing interceptors (spans made and dropped: no exporter), add to one
// unary call: alone, around a handler that does nothing, and over
// loopback HTTP/1.1 with a real Connect client, where the call's own
// cost is the yardstick.
func BenchmarkObservedCall(b *testing.B) {
	traced, err := api.TraceInterceptors(sdktrace.NewTracerProvider())
	if err != nil {
		b.Fatal(err)
	}
	kinds := []struct {
		name         string
		interceptors []connect.Interceptor
	}{
		{"bare", nil},
		{"metrics", []connect.Interceptor{api.MetricsInterceptor(metrics.New())}},
		{"metrics+tracing", append(traced, api.MetricsInterceptor(metrics.New()))},
	}
	for _, k := range kinds {
		b.Run("interceptor/"+k.name, func(b *testing.B) {
			call := connect.UnaryFunc(func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) {
				return connect.NewResponse(&pawlv1.ListResponse{}), nil
			})
			for i := len(k.interceptors) - 1; i >= 0; i-- {
				call = k.interceptors[i].WrapUnary(call)
			}
			req := connect.NewRequest(&pawlv1.ListRequest{Prefix: "/app/"})
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := call(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	for _, k := range kinds {
		b.Run("loopback/"+k.name, func(b *testing.B) {
			mux := http.NewServeMux()
			mux.Handle(pawlv1connect.NewKVServiceHandler(refusing{}, connect.WithInterceptors(k.interceptors...)))
			srv := httptest.NewServer(mux)
			defer srv.Close()
			kv := pawlv1connect.NewKVServiceClient(srv.Client(), srv.URL)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := kv.List(ctx, connect.NewRequest(&pawlv1.ListRequest{Prefix: "/app/"})); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
