package rlqs

import (
	"context"
	"strings"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// TracerScope is the instrumentation scope of the spans started here.
const TracerScope = "github.com/extauthz/extauthz/pkg/envoy/rlqs"

// SpanReport names the span of one usage report: a stream lives as long as
// its Envoy (hours), so the unit of work traced is each report, with the
// store calls it makes (demands, allocation, charges) as its children.
var SpanReport = strings.TrimPrefix(rlqspb.RateLimitQuotaService_StreamRateLimitQuotas_FullMethodName, "/") + " report"

// Attributes of a report span; none holds a bucket ID's values.
const (
	AttrDomain      = attribute.Key("extauthz.domain")           // the stream's domain, or "_unknown" when the policy lacks it
	AttrBuckets     = attribute.Key("extauthz.rlqs.buckets")     // bucket usages in the report
	AttrAssignments = attribute.Key("extauthz.rlqs.assignments") // assignments sent in reply
)

func tracerOf(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return noop.NewTracerProvider().Tracer(TracerScope)
	}
	return tp.Tracer(TracerScope)
}

// startReport starts a report's span. The domain comes from Envoy's
// configuration, not from clients, but only a domain the policy defines is
// written as it is.
func (s *Server) startReport(ctx context.Context, domain string, buckets int) (context.Context, trace.Span) {
	ctx, span := s.tracer.Start(ctx, SpanReport, trace.WithSpanKind(trace.SpanKindServer))
	if !span.IsRecording() {
		return ctx, span
	}
	if s.opts.Policy().Domain(domain) == nil {
		domain = "_unknown"
	}
	span.SetAttributes(attribute.String("extauthz.api", "rlqs"), AttrDomain.String(domain), AttrBuckets.Int(buckets))
	return ctx, span
}

func endReport(span trace.Span, assignments int) {
	if span.IsRecording() {
		span.SetAttributes(AttrAssignments.Int(assignments))
	}
	span.End()
}
