// Package tracing exports pawld's spans over OTLP: a tracer provider
// whose batches go, by gRPC, to the collector at an endpoint URL
// (--otlp-endpoint). The spans themselves are made by the Connect
// interceptors of package api; without an endpoint there is no provider
// and no span.
package tracing

import (
	"context"
	"fmt"
	"net/url"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// ServiceName is the service.name of pawld's spans.
const ServiceName = "pawld"

// CheckEndpoint checks an OTLP endpoint URL: http://host:port (plaintext
// gRPC) or https://host:port (gRPC over TLS), with a host and nothing
// else.
func CheckEndpoint(endpoint string) error {
	u, err := url.Parse(endpoint)
	switch {
	case err != nil:
		return fmt.Errorf("tracing: OTLP endpoint %q: %w", endpoint, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("tracing: OTLP endpoint %q: give a URL, http://host:4317 (plaintext) or https://host:4317 (TLS)", endpoint)
	case u.Host == "":
		return fmt.Errorf("tracing: OTLP endpoint %q names no host", endpoint)
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.User != nil:
		return fmt.Errorf("tracing: OTLP endpoint %q: give only a scheme, a host and a port (OTLP over gRPC has no path)", endpoint)
	}
	return nil
}

// New returns a tracer provider that exports to the OTLP/gRPC collector
// at endpoint (see CheckEndpoint), in batches. The exporter connects
// lazily: a collector that is down costs dropped spans, never a failed
// start. The caller must Shutdown the provider, which sends what is
// still queued.
func New(ctx context.Context, endpoint string) (*sdktrace.TracerProvider, error) {
	if err := CheckEndpoint(endpoint); err != nil {
		return nil, err
	}
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(endpoint))
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter for %s: %w", endpoint, err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", ServiceName))
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}
