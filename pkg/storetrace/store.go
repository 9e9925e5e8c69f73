// Package storetrace wraps the core stores (pkg/ratelimit,
// pkg/idempotency) with one client span per call, so that the core packages
// stay free of OpenTelemetry. The spans start under the caller's span, which
// pkg/envoy's Tracing starts for each Envoy call; the provider comes from
// internal/tracing. A process without tracing wraps nothing.
package storetrace

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/extauthz/extauthz/internal/tracing"
	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// Backends, the value of AttrBackend.
const (
	BackendRedis  = "redis"
	BackendMemory = "memory"
)

// Attributes of the store spans. Every value comes from a closed set: the
// keys, tenants and Idempotency-Keys a call carries are never recorded.
const (
	// AttrBackend is the configured store: BackendRedis or BackendMemory.
	// A rate-limit decision answered by the local over-limit cache or the
	// in-process fallback still shows the configured backend (the failover
	// metrics tell those apart).
	AttrBackend = attribute.Key("extauthz.store.backend")
	// AttrAlgorithm is the algorithm of a rate-limit call's limits, or
	// "mixed" when they differ.
	AttrAlgorithm = attribute.Key("extauthz.algorithm")
	// AttrBatchSize is how many requests one AllowBatch decided.
	AttrBatchSize = attribute.Key("extauthz.batch.size")
	// AttrIdempotencyOutcome is what Begin found (idempotency.OutcomeKind).
	AttrIdempotencyOutcome = attribute.Key("extauthz.idempotency.outcome")
)

// Span names of the store calls.
const (
	SpanAllow      = "ratelimit.Store/Allow"
	SpanAllowBatch = "ratelimit.Store/AllowBatch"
	SpanBegin      = "idempotency.Store/Begin"
	SpanComplete   = "idempotency.Store/Complete"
	SpanRelease    = "idempotency.Store/Release"
	SpanRenew      = "idempotency.Store/Renew"
)

// storeTracer starts the client spans of one store.
type storeTracer struct {
	tracer trace.Tracer
	attrs  []attribute.KeyValue // the backend's, on every span
}

func newStoreTracer(tp trace.TracerProvider, backend string) storeTracer {
	attrs := []attribute.KeyValue{AttrBackend.String(backend)}
	if backend == BackendRedis {
		attrs = append(attrs, semconv.DBSystemNameRedis)
	}
	return storeTracer{tracer: tp.Tracer(tracing.ScopeName), attrs: attrs}
}

func (t storeTracer) start(ctx context.Context, name string) (context.Context, trace.Span) {
	ctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() { // unsampled calls skip the attributes
		span.SetAttributes(t.attrs...)
	}
	return ctx, span
}

// end records err, if any, and ends span.
func end(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, ErrorType(err))
		span.SetAttributes(semconv.ErrorTypeKey.String(ErrorType(err)))
	}
	span.End()
}

// ErrorType names the class of a store error, for error.type: a closed set,
// where the error's text could one day carry a key.
func ErrorType(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, idempotency.ErrLeaseLost):
		return "lease_lost"
	case errors.Is(err, idempotency.ErrTooLarge):
		return "too_large"
	case errors.Is(err, idempotency.ErrUnavailable):
		return "unavailable"
	case errors.Is(err, ratelimit.ErrClosed), errors.Is(err, idempotency.ErrClosed):
		return "closed"
	}
	return "store"
}

// RateLimitStore returns s with one client span per call, started under
// the caller's span; backend is BackendRedis or BackendMemory.
func RateLimitStore(s ratelimit.Store, tp trace.TracerProvider, backend string) ratelimit.Store {
	return &rateLimitStore{Store: s, t: newStoreTracer(tp, backend)}
}

type rateLimitStore struct {
	ratelimit.Store // Close passes through
	t               storeTracer
}

var _ ratelimit.Store = (*rateLimitStore)(nil)

func (s *rateLimitStore) Allow(ctx context.Context, key string, limit ratelimit.Limit, hits int64) (ratelimit.Result, error) {
	ctx, span := s.t.start(ctx, SpanAllow)
	if span.IsRecording() {
		span.SetAttributes(AttrAlgorithm.String(algorithmName(limit.Algorithm)))
	}
	res, err := s.Store.Allow(ctx, key, limit, hits)
	end(span, err)
	return res, err
}

func (s *rateLimitStore) AllowBatch(ctx context.Context, reqs []ratelimit.Request) ([]ratelimit.Decision, error) {
	ctx, span := s.t.start(ctx, SpanAllowBatch)
	if span.IsRecording() {
		span.SetAttributes(AttrAlgorithm.String(batchAlgorithm(reqs)), AttrBatchSize.Int(len(reqs)))
	}
	ds, err := s.Store.AllowBatch(ctx, reqs)
	end(span, err)
	return ds, err
}

// algorithmName bounds an algorithm to the known names (the policy is
// validated, so "other" means a bug, not a caller's value).
func algorithmName(a ratelimit.Algorithm) string {
	if a = a.OrDefault(); a.Valid() {
		return string(a)
	}
	return "other"
}

// batchAlgorithm is the one algorithm of every limit in reqs, or "mixed".
func batchAlgorithm(reqs []ratelimit.Request) string {
	name := ""
	for _, r := range reqs {
		for _, l := range r.Limits {
			switch a := algorithmName(l.Algorithm); {
			case name == "":
				name = a
			case name != a:
				return "mixed"
			}
		}
	}
	return name
}

// IdempotencyStore returns s with one client span per call, started under
// the caller's span; backend is BackendRedis or BackendMemory.
func IdempotencyStore(s idempotency.Store, tp trace.TracerProvider, backend string) idempotency.Store {
	return &idempotencyStore{Store: s, t: newStoreTracer(tp, backend)}
}

type idempotencyStore struct {
	idempotency.Store // Close passes through
	t                 storeTracer
}

var _ idempotency.Store = (*idempotencyStore)(nil)

func (s *idempotencyStore) Begin(ctx context.Context, scope, key string, fp idempotency.Fingerprint, ttls idempotency.TTLs) (idempotency.Outcome, error) {
	ctx, span := s.t.start(ctx, SpanBegin)
	out, err := s.Store.Begin(ctx, scope, key, fp, ttls)
	if err == nil && span.IsRecording() {
		span.SetAttributes(AttrIdempotencyOutcome.String(out.Kind.String()))
	}
	end(span, err)
	return out, err
}

func (s *idempotencyStore) Complete(ctx context.Context, lease idempotency.Lease, resp idempotency.Response) error {
	ctx, span := s.t.start(ctx, SpanComplete)
	err := s.Store.Complete(ctx, lease, resp)
	end(span, err)
	return err
}

func (s *idempotencyStore) Release(ctx context.Context, lease idempotency.Lease) error {
	ctx, span := s.t.start(ctx, SpanRelease)
	err := s.Store.Release(ctx, lease)
	end(span, err)
	return err
}

func (s *idempotencyStore) Renew(ctx context.Context, lease idempotency.Lease) error {
	ctx, span := s.t.start(ctx, SpanRenew)
	err := s.Store.Renew(ctx, lease)
	end(span, err)
	return err
}
