package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"

	"github.com/extauthz/extauthz/internal/tracing"
	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/storetrace"
)

// traceFlushTimeout bounds the export of the spans still queued at
// shutdown, which comes after EXTAUTHZ_DRAIN_DELAY, EXTAUTHZ_SHUTDOWN_TIMEOUT
// and the HTTP servers' extra second. k8s/base's worst case stays inside
// its 30s grace period: 5s preStop + 10s + 10s + 1s + 3s = 29s. A healthy
// collector takes milliseconds.
const traceFlushTimeout = 3 * time.Second

// tracer is the process's trace export. The zero value is tracing off
// (EXTAUTHZ_OTLP_ENDPOINT empty): it wraps nothing and installs no
// interceptor, so every call runs exactly as it would without tracing.
type tracer struct {
	provider *sdktrace.TracerProvider
	envoy    *envoy.Tracing
	log      *slog.Logger
}

// newTracer builds the exporter and provider when an endpoint is set.
// Nothing connects yet; the first batch of spans does.
func newTracer(ctx context.Context, cfg Config, policies envoy.PolicySource, log *slog.Logger) (tracer, error) {
	if cfg.OTLPEndpoint == "" {
		return tracer{}, nil
	}
	tp, err := tracing.NewProvider(ctx, tracing.Config{
		Endpoint: cfg.OTLPEndpoint, Protocol: cfg.OTLPProtocol, SampleRatio: cfg.TraceSampleRatio, ServiceVersion: version,
	})
	if err != nil {
		return tracer{}, err
	}
	et, err := envoy.NewTracing(tp, policies)
	if err != nil {
		return tracer{}, errors.Join(err, tp.Shutdown(ctx))
	}
	// Export failures reach the SDK's process-wide handler; without this
	// they would print unstructured to stderr.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("trace export", "err", err) }))
	log.Info("tracing", "otlp_endpoint", redactURL(cfg.OTLPEndpoint), "otlp_protocol", cfg.OTLPProtocol, "sample_ratio", cfg.TraceSampleRatio)
	return tracer{provider: tp, envoy: et, log: log}, nil
}

func (t tracer) on() bool { return t.provider != nil }

// backend names the configured store for the store spans.
func backend(cfg Config) string {
	if cfg.RedisURL != "" {
		return storetrace.BackendRedis
	}
	return storetrace.BackendMemory
}

// rateLimit wraps the rate-limit store the Envoy servers call with one
// span per call. Only theirs: the process keeps the bare store for
// readiness and Close.
func (t tracer) rateLimit(cfg Config, s ratelimit.Store) ratelimit.Store {
	if !t.on() {
		return s
	}
	return storetrace.RateLimitStore(s, t.provider, backend(cfg))
}

// idempotency does the same for the Idempotency-Key store.
func (t tracer) idempotency(cfg Config, d idempotencyDeps) idempotencyDeps {
	if t.on() {
		d.store = storetrace.IdempotencyStore(d.store, t.provider, backend(cfg))
	}
	return d
}

// serverOptions installs pkg/envoy's tracing interceptors.
func (t tracer) serverOptions() []grpc.ServerOption {
	if !t.on() {
		return nil
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(t.envoy.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(t.envoy.StreamInterceptor()),
	}
}

// shutdown exports the spans still queued, within traceFlushTimeout. It
// runs after the gRPC server stopped, so the last calls' spans are in.
func (t tracer) shutdown() {
	if !t.on() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), traceFlushTimeout)
	defer cancel()
	if err := t.provider.Shutdown(ctx); err != nil {
		t.log.Warn("tracing: spans lost at shutdown", "err", err)
	}
}
