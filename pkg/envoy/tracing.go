package envoy

import (
	"context"
	"errors"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	rpccode "google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TracerScope is the instrumentation scope of the spans started here.
const TracerScope = "github.com/extauthz/extauthz/pkg/envoy"

// Span names: the gRPC method, as OpenTelemetry's RPC conventions name
// server spans.
var (
	SpanShouldRateLimit = strings.TrimPrefix(rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, "/")
	SpanCheck           = strings.TrimPrefix(authv3.Authorization_Check_FullMethodName, "/")
	SpanProcess         = strings.TrimPrefix(extprocv3.ExternalProcessor_Process_FullMethodName, "/")
)

// Attributes of the server spans, besides OpenTelemetry's rpc.* and
// http.response.status_code. Each takes values from a closed set; request
// values (tenants, descriptor values, paths, Idempotency-Keys) never
// become attributes.
const (
	// AttrAPI is the API, as the metrics' api label.
	AttrAPI = attribute.Key("extauthz.api")
	// AttrDomain is the RLS domain as the metrics label it (UnknownDomain
	// when the policy does not define it), or "http" for ext_authz.
	AttrDomain = attribute.Key("extauthz.domain")
	// AttrOutcome is the call's answer: see the Outcome* constants and
	// OutcomeDenied, OutcomeContinue, OutcomeImmediate.
	AttrOutcome = attribute.Key("extauthz.outcome")
	// AttrDescriptors is how many descriptors an RLS call carried.
	AttrDescriptors = attribute.Key("extauthz.descriptors")
	// AttrIdempotencyAction is ext_authz's handoff to ext_proc: ActionLease
	// or ActionReplay.
	AttrIdempotencyAction = attribute.Key("extauthz.idempotency.action")
)

// Span outcomes besides the decision outcomes of the metrics.
const (
	// OutcomeDenied: ext_authz answered the client itself (an idempotency
	// reply or replay; http.response.status_code says which).
	OutcomeDenied = "denied"
	// OutcomeContinue: an ext_proc stream let the request and its response
	// through (possibly storing the response).
	OutcomeContinue = "continue"
	// OutcomeImmediate: an ext_proc stream answered the client itself.
	OutcomeImmediate = "immediate"
)

// Tracing starts one server span per Envoy call, as gRPC interceptors (so
// the handlers stay as they are, and a server without tracing runs none of
// this): ShouldRateLimit and Check one span per call, Process one span per
// stream, that is per HTTP request (see StreamInterceptor). Store calls
// made under a span become its children when the stores are wrapped
// (pkg/storetrace).
//
// The parent comes from W3C trace context (traceparent, tracestate) sent by
// Envoy: the gRPC metadata first, then, for ext_authz and ext_proc, the
// HTTP request's headers. The metadata wins because Envoy, when it traces,
// puts its own span for the ext_authz or ext_proc call there: the nearer
// parent. The request headers carry the client's (or Envoy's downstream)
// context, which is what the metadata lacks when Envoy does not trace.
type Tracing struct {
	tracer   trace.Tracer
	policies PolicySource
}

// NewTracing returns the interceptors' state: spans go to tp, and RLS
// domains are labelled as the policies' current snapshot knows them.
func NewTracing(tp trace.TracerProvider, policies PolicySource) (*Tracing, error) {
	switch {
	case IsNil(tp):
		return nil, errors.New("envoy: NewTracing: nil tracer provider")
	case IsNil(policies):
		return nil, errors.New("envoy: NewTracing: nil policy source")
	}
	return &Tracing{tracer: tp.Tracer(TracerScope), policies: policies}, nil
}

// traceContext is the only propagator: baggage is not used.
var traceContext = propagation.TraceContext{}

// UnaryInterceptor traces ShouldRateLimit and Check; other unary calls
// (health, reflection) pass untouched.
func (t *Tracing) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		switch r := req.(type) {
		case *rlsv3.RateLimitRequest:
			return t.shouldRateLimit(ctx, r, handler)
		case *authv3.CheckRequest:
			return t.check(ctx, r, handler)
		}
		return handler(ctx, req)
	}
}

func (t *Tracing) shouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest, handler grpc.UnaryHandler) (any, error) {
	ctx, span := t.start(ctx, SpanShouldRateLimit, APIRateLimit, nil)
	defer span.End()
	resp, err := handler(ctx, req)
	if span.IsRecording() {
		outcome := OutcomeOK
		if r, _ := resp.(*rlsv3.RateLimitResponse); r.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			outcome = OutcomeOverLimit
		}
		span.SetAttributes(AttrDomain.String(t.domainLabel(req.GetDomain())), AttrDescriptors.Int(len(req.GetDescriptors())))
		finish(span, outcome, err)
	}
	return resp, err
}

// domainLabel is the RLS domain as extauthz_decisions_total labels it.
func (t *Tracing) domainLabel(name string) string {
	if p := t.policies.Current(); p != nil {
		if d := p.Domain(name); d != nil {
			return d.Name
		}
	}
	return UnknownDomain
}

func (t *Tracing) check(ctx context.Context, req *authv3.CheckRequest, handler grpc.UnaryHandler) (any, error) {
	hr := req.GetAttributes().GetRequest().GetHttp()
	ctx, span := t.start(ctx, SpanCheck, APIExtAuthz, authzHeaders{hr})
	defer span.End()
	resp, err := handler(ctx, req)
	if span.IsRecording() {
		r, _ := resp.(*authv3.CheckResponse)
		span.SetAttributes(AttrDomain.String(HTTPDomain))
		if d := r.GetDeniedResponse(); d != nil {
			span.SetAttributes(semconv.HTTPResponseStatusCode(int(d.GetStatus().GetCode())))
		}
		if a := handoffAction(r); a != "" {
			span.SetAttributes(AttrIdempotencyAction.String(a))
		}
		finish(span, checkOutcome(r), err)
	}
	return resp, err
}

// checkOutcome names a Check answer by the gRPC status Check gives it.
func checkOutcome(r *authv3.CheckResponse) string {
	switch codes.Code(r.GetStatus().GetCode()) {
	case codes.OK:
		return OutcomeOK
	case codes.ResourceExhausted:
		return OutcomeOverLimit
	case codes.InvalidArgument:
		return OutcomeRejected
	}
	return OutcomeDenied
}

// handoffAction is the idempotency action a Check answer hands to
// ext_proc, if it is one of ours.
func handoffAction(r *authv3.CheckResponse) string {
	v := r.GetDynamicMetadata().GetFields()[MetadataField].GetStructValue().GetFields()[MetadataAction].GetStringValue()
	if v == ActionLease || v == ActionReplay {
		return v
	}
	return ""
}

// start starts a server span under the trace context of the gRPC metadata
// or, without one there, of headers (nil: none).
func (t *Tracing) start(ctx context.Context, name, api string, headers propagation.TextMapCarrier, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	parent := traceContext.Extract(ctx, metadataCarrier{ctx})
	if !trace.SpanContextFromContext(parent).IsValid() && headers != nil {
		parent = traceContext.Extract(ctx, headers)
	}
	ctx, span := t.tracer.Start(parent, name, append(opts, trace.WithSpanKind(trace.SpanKindServer))...)
	// Attributes after the start, and only on a recorded span: the
	// samplers do not read them, and an unsampled call then skips them.
	if span.IsRecording() {
		span.SetAttributes(semconv.RPCSystemNameGRPC, semconv.RPCMethod(name), AttrAPI.String(api))
	}
	return ctx, span
}

// finish records the call's outcome and its gRPC status: an error (the
// store failed, or the caller went away) marks the span failed.
func finish(span trace.Span, outcome string, err error) {
	code := status.Code(err)
	span.SetAttributes(semconv.RPCResponseStatusCode(rpccode.Code(code).String()))
	if err == nil {
		span.SetAttributes(AttrOutcome.String(outcome))
		return
	}
	span.SetAttributes(AttrOutcome.String(OutcomeError))
	span.RecordError(err)
	span.SetStatus(otelcodes.Error, code.String())
}

// metadataCarrier reads trace context from incoming gRPC metadata.
type metadataCarrier struct{ ctx context.Context }

func (c metadataCarrier) Get(key string) string {
	if v := metadata.ValueFromIncomingContext(c.ctx, key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (metadataCarrier) Set(string, string) {}
func (metadataCarrier) Keys() []string     { return nil }

// authzHeaders reads trace context from ext_authz's request headers:
// header_map when Envoy sent it (encode_raw_headers), else the map.
type authzHeaders struct {
	hr *authv3.AttributeContext_HttpRequest
}

func (c authzHeaders) Get(key string) string {
	if hm := c.hr.GetHeaderMap(); len(hm.GetHeaders()) > 0 {
		return headerMapValue(hm, key)
	}
	return c.hr.GetHeaders()[key]
}

func (authzHeaders) Set(string, string) {}
func (authzHeaders) Keys() []string     { return nil }

// protoHeaderCarrier reads trace context from an ext_proc header map.
type protoHeaderCarrier struct{ hm *corev3.HeaderMap }

func (c protoHeaderCarrier) Get(key string) string { return headerMapValue(c.hm, key) }
func (protoHeaderCarrier) Set(string, string)      {}
func (protoHeaderCarrier) Keys() []string          { return nil }

// headerMapValue is the first value of name in hm (raw_value preferred).
func headerMapValue(hm *corev3.HeaderMap, name string) string {
	for _, h := range hm.GetHeaders() {
		if strings.EqualFold(h.GetKey(), name) {
			if raw := h.GetRawValue(); len(raw) > 0 {
				return string(raw)
			}
			return h.GetValue()
		}
	}
	return ""
}
