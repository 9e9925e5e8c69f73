package authz

import (
	"context"
	"net"
	"strings"
	"testing"

	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/extauthz/extauthz/internal/testclock"
	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
	"github.com/extauthz/extauthz/pkg/envoy/rls"
	"github.com/extauthz/extauthz/pkg/idempotency/memstore"
	"github.com/extauthz/extauthz/pkg/policy"
	"github.com/extauthz/extauthz/pkg/storetrace"
)

// These are the tests of pkg/envoy's Tracing. They live here because they
// serve all three APIs through the interceptors: this package's tests can
// import package rls; pkg/envoy's own tests can import neither server.

// Two callers' trace contexts: Envoy's (in gRPC metadata) and the
// client's (in the HTTP request headers).
const (
	envoyTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	envoySpan   = "00f067aa0ba902b7"
	clientTrace = "0af7651916cd43dd8448eb211c80319c"
	clientSpan  = "b7ad6b7169203331"
)

func traceparent(traceID, spanID string) string { return "00-" + traceID + "-" + spanID + "-01" }

// traceEnv serves RLS, Authz and ExtProc with the tracing interceptors and
// traced stores, recording every span in memory.
type traceEnv struct {
	spans *tracetest.InMemoryExporter
	rls   rlsv3.RateLimitServiceClient
	authz authv3.AuthorizationClient
	proc  extprocv3.ExternalProcessorClient
}

func startTraced(t *testing.T) *traceEnv {
	t.Helper()
	e := &traceEnv{spans: tracetest.NewInMemoryExporter()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(e.spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	p := envoytest.WritePolicy(t, envoytest.EdgePolicy+idemPolicy)
	src := envoy.PolicyFunc(func() *policy.Policy { return p })
	clk := testclock.New(envoytest.T0)
	limits := storetrace.RateLimitStore(envoytest.NewTestStore(t, clk.Now), tp, storetrace.BackendMemory)
	idem := storetrace.IdempotencyStore(memstore.New(memstore.Config{Now: clk.Now}), tp, storetrace.BackendMemory)
	reg := prometheus.NewRegistry()
	m, err := envoy.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	events, err := NewIdempotencyMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	rls, err := rls.NewRLS(limits, src, m)
	if err != nil {
		t.Fatal(err)
	}
	az, err := NewAuthz(limits, idem, src, m, events)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := NewExtProc(idem, src, m, events)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := envoy.NewTracing(tp, src)
	if err != nil {
		t.Fatal(err)
	}
	conn := serveWith(t, []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(tr.UnaryInterceptor()), grpc.ChainStreamInterceptor(tr.StreamInterceptor()),
	}, rls, az, ep)
	e.rls = rlsv3.NewRateLimitServiceClient(conn)
	e.authz = authv3.NewAuthorizationClient(conn)
	e.proc = extprocv3.NewExternalProcessorClient(conn)
	return e
}

// serveWith is envoytest.ServeLoopback with server options and several services.
func serveWith(t *testing.T, opts []grpc.ServerOption, svcs ...interface{ Register(grpc.ServiceRegistrar) }) *grpc.ClientConn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(append([]grpc.ServerOption{grpc.ForceServerCodecV2(envoy.NewCodec())}, opts...)...)
	for _, s := range svcs {
		s.Register(srv)
	}
	go func() { _ = srv.Serve(ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); srv.Stop() })
	return conn
}

// withTraceparent is ctx carrying a traceparent in its outgoing metadata,
// as Envoy's gRPC client sends it when Envoy traces.
func withTraceparent(ctx context.Context, traceID, spanID string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "traceparent", traceparent(traceID, spanID))
}

// span returns the one span named name, failing unless there is exactly one.
func (e *traceEnv) span(t *testing.T, name string) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range e.spans.GetSpans() {
		if s.Name == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans named %s, want 1 (all: %v)", len(found), name, spanNames(e.spans.GetSpans()))
	}
	return found[0]
}

func spanNames(spans tracetest.SpanStubs) []string {
	var names []string
	for _, s := range spans {
		names = append(names, s.Name)
	}
	return names
}

// wantParent fails unless s is in trace traceID under span spanID.
func wantParent(t *testing.T, s tracetest.SpanStub, traceID, spanID string) {
	t.Helper()
	if got := s.SpanContext.TraceID().String(); got != traceID {
		t.Errorf("%s: trace %s, want %s", s.Name, got, traceID)
	}
	if got := s.Parent.SpanID().String(); got != spanID {
		t.Errorf("%s: parent span %s, want %s", s.Name, got, spanID)
	}
}

// wantAttrs fails unless s has every attribute of want, with its value.
func wantAttrs(t *testing.T, s tracetest.SpanStub, want map[string]any) {
	t.Helper()
	got := map[string]any{}
	for _, kv := range s.Attributes {
		got[string(kv.Key)] = kv.Value.AsInterface()
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s = %v, want %v (all: %v)", s.Name, k, got[k], v, got)
		}
	}
}

// wantNoValue fails if any attribute or event of any span holds value.
func wantNoValue(t *testing.T, spans tracetest.SpanStubs, value string) {
	t.Helper()
	for _, s := range spans {
		attrs := append([]attribute.KeyValue(nil), s.Attributes...)
		for _, ev := range s.Events {
			attrs = append(attrs, ev.Attributes...)
		}
		for _, kv := range attrs {
			if strings.Contains(kv.Value.String(), value) {
				t.Errorf("%s: attribute %s = %q holds a request value", s.Name, kv.Key, kv.Value.String())
			}
		}
	}
}

func TestTracingRLSSpanUnderEnvoysSpan(t *testing.T) {
	t.Parallel()
	e := startTraced(t)
	ctx := withTraceparent(context.Background(), envoyTrace, envoySpan)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonrlv3.RateLimitDescriptor{
		envoytest.Desc("tenant", "tenant-secret-42", "source_cluster", "proxy", "destination_cluster", "mongo_1"),
	}}
	if _, err := e.rls.ShouldRateLimit(ctx, req); err != nil {
		t.Fatal(err)
	}
	server := e.span(t, envoy.SpanShouldRateLimit)
	wantParent(t, server, envoyTrace, envoySpan)
	if server.SpanKind != trace.SpanKindServer || !server.Parent.IsRemote() {
		t.Errorf("server span kind %v, remote parent %v", server.SpanKind, server.Parent.IsRemote())
	}
	wantAttrs(t, server, map[string]any{"extauthz.api": "ratelimit", "extauthz.domain": "edge", "extauthz.outcome": "ok",
		"extauthz.descriptors": int64(1), "rpc.system.name": "grpc", "rpc.method": envoy.SpanShouldRateLimit, "rpc.response.status_code": "OK"})
	store := e.span(t, storetrace.SpanAllowBatch)
	wantParent(t, store, envoyTrace, server.SpanContext.SpanID().String())
	wantAttrs(t, store, map[string]any{"extauthz.store.backend": "memory", "extauthz.algorithm": "gcra", "extauthz.batch.size": int64(1)})
	wantNoValue(t, e.spans.GetSpans(), "tenant-secret-42")

	// A domain the policy lacks is labelled as the metrics label it.
	e.spans.Reset()
	if _, err := e.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "made-up-domain-7"}); err != nil {
		t.Fatal(err)
	}
	wantAttrs(t, e.span(t, envoy.SpanShouldRateLimit), map[string]any{"extauthz.domain": envoy.UnknownDomain})
	wantNoValue(t, e.spans.GetSpans(), "made-up-domain-7")
}

// TestTracingFollowsTheCallersDecision: an unsampled parent from Envoy
// means no span, whatever the local sampler would do.
func TestTracingFollowsTheCallersDecision(t *testing.T) {
	t.Parallel()
	e := startTraced(t)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-"+envoyTrace+"-"+envoySpan+"-00")
	if _, err := e.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge"}); err != nil {
		t.Fatal(err)
	}
	if spans := e.spans.GetSpans(); len(spans) != 0 {
		t.Errorf("unsampled parent: recorded %v", spanNames(spans))
	}
}

func TestTracingCheckParent(t *testing.T) {
	t.Parallel()
	e := startTraced(t)
	req := checkReq("POST", "/orders/1", []byte("{}"), "x-tenant-id", "tenant-secret-42", "idempotency-key", "key-secret-43",
		"traceparent", traceparent(clientTrace, clientSpan), "tracestate", "client=1")

	// Headers only: the client's context.
	resp, err := e.authz.Check(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	server := e.span(t, envoy.SpanCheck)
	wantParent(t, server, clientTrace, clientSpan)
	if got := server.Parent.TraceState().String(); got != "client=1" {
		t.Errorf("tracestate %q, want the headers' client=1", got)
	}
	wantAttrs(t, server, map[string]any{"extauthz.api": "ext_authz", "extauthz.domain": "http", "extauthz.outcome": "ok",
		"extauthz.idempotency.action": envoy.ActionLease})
	begin := e.span(t, storetrace.SpanBegin)
	wantParent(t, begin, clientTrace, server.SpanContext.SpanID().String())
	wantAttrs(t, begin, map[string]any{"extauthz.idempotency.outcome": "acquired"})
	wantNoValue(t, e.spans.GetSpans(), "tenant-secret-42")
	wantNoValue(t, e.spans.GetSpans(), "key-secret-43")
	if resp.GetOkResponse() == nil {
		t.Fatalf("Check = %v, want OK", resp)
	}

	// Metadata too: Envoy's ext_authz span wins, tracestate and all.
	e.spans.Reset()
	ctx := withTraceparent(context.Background(), envoyTrace, envoySpan)
	if _, err := e.authz.Check(ctx, req); err != nil {
		t.Fatal(err)
	}
	server = e.span(t, envoy.SpanCheck)
	wantParent(t, server, envoyTrace, envoySpan)
	if got := server.Parent.TraceState().String(); got != "" {
		t.Errorf("tracestate %q mixed in from the headers", got)
	}
	// The same key again, in flight: a 409 answered by ext_authz.
	wantAttrs(t, server, map[string]any{"extauthz.outcome": envoy.OutcomeDenied, "http.response.status_code": int64(409)})
}

func TestTracingProcessOneSpanPerStream(t *testing.T) {
	t.Parallel()
	e := startTraced(t)
	c, err := e.proc.Process(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s := &stream{t: t, c: c}
	r := s.send(reqHeaders(filterv3.ProcessingMode_BUFFERED, true, nil, ":method", "POST", ":path", "/orders/1",
		"x-tenant-id", "tenant-secret-42", "idempotency-key", "key-secret-43", "traceparent", traceparent(clientTrace, clientSpan)))
	if r.GetRequestHeaders() == nil {
		t.Fatalf("request headers answered %v, want continue (the handler got the first message)", r)
	}
	s.upstream(201, []byte(`{}`), viaUpstream, 0, "content-type", "application/json")
	s.close()

	server := e.span(t, envoy.SpanProcess)
	wantParent(t, server, clientTrace, clientSpan)
	wantAttrs(t, server, map[string]any{"extauthz.api": "ext_proc", "extauthz.outcome": envoy.OutcomeContinue})
	var phases []string
	for _, ev := range server.Events {
		phases = append(phases, ev.Name)
	}
	if got := strings.Join(phases, ","); got != "request_headers,response_headers,response_body" {
		t.Errorf("events %s", got)
	}
	for _, name := range []string{storetrace.SpanBegin, storetrace.SpanComplete} {
		wantParent(t, e.span(t, name), clientTrace, server.SpanContext.SpanID().String())
	}
	wantNoValue(t, e.spans.GetSpans(), "tenant-secret-42")
	wantNoValue(t, e.spans.GetSpans(), "key-secret-43")
}

func TestTracingProcessImmediateAndMetadataParent(t *testing.T) {
	t.Parallel()
	e := startTraced(t)
	c, err := e.proc.Process(withTraceparent(context.Background(), envoyTrace, envoySpan))
	if err != nil {
		t.Fatal(err)
	}
	s := &stream{t: t, c: c}
	// No Idempotency-Key on a route that requires one: 400 at once.
	r := s.send(reqHeaders(filterv3.ProcessingMode_BUFFERED, true, nil, ":method", "POST", ":path", "/orders/1",
		"x-tenant-id", "acme", "traceparent", traceparent(clientTrace, clientSpan)))
	if immediateOf(r) == nil {
		t.Fatalf("answered %v, want an immediate 400", r)
	}
	s.close()
	server := e.span(t, envoy.SpanProcess)
	wantParent(t, server, envoyTrace, envoySpan)
	wantAttrs(t, server, map[string]any{"extauthz.outcome": envoy.OutcomeImmediate, "http.response.status_code": int64(400)})
}
