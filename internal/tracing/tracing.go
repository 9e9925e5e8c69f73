// Package tracing sets up OpenTelemetry trace export over OTLP: the
// provider every span of the process goes to, and the instrumentation scope.
// Envoy-facing spans and trace-context propagation live in pkg/envoy
// (Tracing), the store spans in pkg/storetrace; this package imports
// nothing from pkg/, so that any of them may use it.
//
// Tracing is off unless an endpoint is configured: the caller then builds
// no provider and wraps nothing, so a process without tracing runs exactly
// the code it ran before tracing existed.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
)

// ScopeName is the instrumentation scope of every span extauthz starts.
const ScopeName = "github.com/extauthz/extauthz"

// DefaultServiceName is service.name unless OTEL_SERVICE_NAME or
// OTEL_RESOURCE_ATTRIBUTES say otherwise.
const DefaultServiceName = "extauthz"

// OTLP protocols, as OTEL_EXPORTER_OTLP_PROTOCOL spells them.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// tracesPath is where OTLP/HTTP takes spans, below the endpoint's path.
const tracesPath = "/v1/traces"

// Config selects the exporter and the sampler.
type Config struct {
	// Endpoint is the collector's base URL, http:// (plaintext) or
	// https:// (TLS), with a port. OTLP/HTTP posts to its path +
	// "/v1/traces", as with OTEL_EXPORTER_OTLP_ENDPOINT; OTLP/gRPC takes no
	// path.
	Endpoint string
	// Protocol is ProtocolGRPC or ProtocolHTTP.
	Protocol string
	// SampleRatio is the share of traces started here (calls that arrive
	// without a trace context) that are sampled, in [0, 1]. A caller's
	// sampling decision is always followed.
	SampleRatio float64
	// ServiceVersion is service.version.
	ServiceVersion string
}

// CheckEndpoint reports whether endpoint suits protocol (see Config).
func CheckEndpoint(endpoint, protocol string) error {
	u, err := url.Parse(endpoint)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return errors.New("scheme must be http or https")
	}
	if _, port, err := net.SplitHostPort(u.Host); err != nil || port == "" || u.Hostname() == "" {
		return errors.New("want host:port")
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return errors.New("no user, query or fragment")
	}
	if protocol == ProtocolGRPC && strings.Trim(u.Path, "/") != "" {
		return errors.New("OTLP/gRPC takes no path")
	}
	return nil
}

// NewProvider returns a tracer provider exporting to cfg.Endpoint in
// batches (the SDK's OTEL_BSP_* variables tune them; OTEL_EXPORTER_OTLP_HEADERS,
// _CERTIFICATE, _COMPRESSION and _TIMEOUT apply to the exporter). Nothing
// connects here: the first batch does. The caller must Shutdown the
// provider, which flushes the spans still queued.
func NewProvider(ctx context.Context, cfg Config) (*sdktrace.TracerProvider, error) {
	if err := CheckEndpoint(cfg.Endpoint, cfg.Protocol); err != nil {
		return nil, fmt.Errorf("endpoint %q: %w", cfg.Endpoint, err)
	}
	if cfg.SampleRatio < 0 || cfg.SampleRatio > 1 {
		return nil, fmt.Errorf("sample ratio %v: want [0, 1]", cfg.SampleRatio)
	}
	exp, err := newExporter(ctx, cfg)
	if err != nil {
		return nil, err
	}
	res, err := newResource(ctx, cfg.ServiceVersion)
	if err != nil {
		return nil, errors.Join(err, exp.Shutdown(ctx))
	}
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))),
	), nil
}

func newExporter(ctx context.Context, cfg Config) (sdktrace.SpanExporter, error) {
	switch cfg.Protocol {
	case ProtocolGRPC:
		return otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(cfg.Endpoint))
	case ProtocolHTTP:
		u, _ := url.Parse(cfg.Endpoint) // checked
		u.Path = strings.TrimSuffix(u.Path, "/") + tracesPath
		return otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(u.String()))
	}
	return nil, fmt.Errorf("protocol %q: want %s or %s", cfg.Protocol, ProtocolGRPC, ProtocolHTTP)
}

// newResource names the service; OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES, detected last, override the defaults.
func newResource(ctx context.Context, version string) (*resource.Resource, error) {
	return resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(DefaultServiceName), semconv.ServiceVersion(version)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
}
