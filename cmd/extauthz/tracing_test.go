package main

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/extauthz/extauthz/internal/otlptest"
)

// Three callers' trace contexts, one per API, and the request values that
// must never reach a span.
const (
	rlsTrace, rlsParent     = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	authzTrace, authzParent = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	procTrace, procParent   = "a3ce929d0e0e47364bf92f3577b34da6", "53995c3f42cd8ad8"
	secretTenant            = "tenant-secret-41"
	secretKey, secretKey2   = "key-secret-42", "key-secret-43"
)

func traceparent(traceID, spanID string) string { return "00-" + traceID + "-" + spanID + "-01" }

// TestBinaryExportsTraces runs the binary against a real OTLP receiver,
// over each protocol, and checks the spans of one call per API: the
// caller's trace, the caller's span as parent, the names and attributes,
// a child span per store call, the resource from OTEL_* variables, and no
// request value anywhere. The spans leave when SIGTERM flushes them.
func TestBinaryExportsTraces(t *testing.T) {
	for _, protocol := range []string{"grpc", "http/protobuf"} {
		t.Run(strings.ReplaceAll(protocol, "/", "_"), func(t *testing.T) {
			recv := otlptest.Start(t, protocol)
			p := start(t, "EXTAUTHZ_CONFIG="+examplePolicy(t), "EXTAUTHZ_DRAIN_DELAY=0s",
				"EXTAUTHZ_OTLP_ENDPOINT="+recv.URL, "EXTAUTHZ_OTLP_PROTOCOL="+protocol,
				"OTEL_SERVICE_NAME=extauthz-test", "OTEL_RESOURCE_ATTRIBUTES=deployment.environment.name=ci")
			callEveryAPI(t, p)
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			p.waitCleanExit(t, 15*time.Second, "after SIGTERM")
			checkExported(t, recv)
		})
	}
}

// TestBinaryTracingOffExportsNothing: with EXTAUTHZ_OTLP_ENDPOINT empty no
// exporter exists, so even the SDK's own endpoint variables, pointing at
// live receivers, see no connection.
func TestBinaryTracingOffExportsNothing(t *testing.T) {
	grpcRecv, httpRecv := otlptest.Start(t, otlptest.GRPC), otlptest.Start(t, otlptest.HTTP)
	p := start(t, "EXTAUTHZ_CONFIG="+examplePolicy(t), "EXTAUTHZ_DRAIN_DELAY=0s", "EXTAUTHZ_OTLP_ENDPOINT=",
		"OTEL_EXPORTER_OTLP_ENDPOINT="+grpcRecv.URL, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="+httpRecv.URL+"/v1/traces",
		"OTEL_BSP_SCHEDULE_DELAY=10")
	callEveryAPI(t, p)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.waitCleanExit(t, 15*time.Second, "after SIGTERM")
	for name, r := range map[string]*otlptest.Receiver{"grpc": grpcRecv, "http": httpRecv} {
		if n, spans := r.Conns(), len(r.Spans()); n != 0 || spans != 0 {
			t.Errorf("%s receiver: %d connections, %d spans; want none", name, n, spans)
		}
	}
	if strings.Contains(p.Logs(), `"msg":"tracing"`) {
		t.Errorf("tracing announced while off:\n%s", p.Logs())
	}
}

// callEveryAPI makes one RLS call (trace context in gRPC metadata), one
// ext_authz Check (in the request headers) and one ext_proc stream (in the
// request headers message), each deciding with the store.
func callEveryAPI(t *testing.T, p *proc) {
	t.Helper()
	conn := p.dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	rctx := metadata.AppendToOutgoingContext(ctx, "traceparent", traceparent(rlsTrace, rlsParent))
	_, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(rctx, &rlsv3.RateLimitRequest{
		Domain: "edge",
		Descriptors: []*commonrlv3.RateLimitDescriptor{{Entries: []*commonrlv3.RateLimitDescriptor_Entry{
			{Key: "tenant", Value: secretTenant}, {Key: "route", Value: "orders"},
		}}},
	})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}

	resp, err := authv3.NewAuthorizationClient(conn).Check(ctx, &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Method: "POST", Path: "/orders/1", Body: "{}", Headers: map[string]string{
				"x-tenant-id": secretTenant, "idempotency-key": `"` + secretKey + `"`, "content-type": "application/json",
				"traceparent": traceparent(authzTrace, authzParent),
			}}}}})
	if err != nil || resp.GetOkResponse() == nil {
		t.Fatalf("Check = %v, %v; want OK with a lease", resp, err)
	}

	storeOnePayment(t, ctx, p)
}

// storeOnePayment drives one wiring (a) ext_proc stream: a bodiless POST whose
// key is taken at the request headers, and a 201 from the upstream that is
// stored.
func storeOnePayment(t *testing.T, ctx context.Context, p *proc) {
	t.Helper()
	stream, err := extprocv3.NewExternalProcessorClient(p.dial(t)).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	headers := func(kv ...string) *corev3.HeaderMap {
		m := &corev3.HeaderMap{}
		for i := 0; i+1 < len(kv); i += 2 {
			m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
		}
		return m
	}
	msgs := []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{EndOfStream: true, Headers: headers(
			":method", "POST", ":path", "/payments", "x-tenant-id", secretTenant, "idempotency-key", `"`+secretKey2+`"`,
			"traceparent", traceparent(procTrace, procParent))}},
			ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: filterv3.ProcessingMode_BUFFERED, ResponseBodyMode: filterv3.ProcessingMode_BUFFERED}},
		{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: headers(":status", "201")}},
			Attributes: map[string]*structpb.Struct{"envoy.filters.http.ext_proc": {Fields: map[string]*structpb.Value{
				"response.code_details": structpb.NewStringValue("via_upstream"), "response.flags": structpb.NewNumberValue(0)}}}},
		{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: []byte(`{"paid":true}`), EndOfStream: true}}},
	}
	for _, m := range msgs {
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
		r, err := stream.Recv()
		if err != nil || r.GetImmediateResponse() != nil {
			t.Fatalf("ext_proc answered %v, %v; want continue", r, err)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err == nil {
		t.Fatal("ext_proc sent a message after the stream ended")
	}
}

// checkExported checks what callEveryAPI left in recv.
func checkExported(t *testing.T, recv *otlptest.Receiver) {
	t.Helper()
	spans := recv.Spans()
	for _, c := range []struct {
		server, traceID, parent string
		attrs                   map[string]string
		stores                  []string
	}{
		{"envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", rlsTrace, rlsParent,
			map[string]string{"extauthz.api": "ratelimit", "extauthz.domain": "edge", "extauthz.outcome": "ok", "extauthz.descriptors": "1"},
			[]string{"ratelimit.Store/AllowBatch"}},
		{"envoy.service.auth.v3.Authorization/Check", authzTrace, authzParent,
			map[string]string{"extauthz.api": "ext_authz", "extauthz.domain": "http", "extauthz.outcome": "ok", "extauthz.idempotency.action": "lease"},
			[]string{"ratelimit.Store/AllowBatch", "idempotency.Store/Begin"}},
		{"envoy.service.ext_proc.v3.ExternalProcessor/Process", procTrace, procParent,
			map[string]string{"extauthz.api": "ext_proc", "extauthz.outcome": "continue"},
			[]string{"idempotency.Store/Begin", "idempotency.Store/Complete"}},
	} {
		server := findSpan(t, spans, c.server, c.traceID)
		if server.ParentSpanID() != c.parent || server.GetKind().String() != "SPAN_KIND_SERVER" {
			t.Errorf("%s: parent %s, kind %v; want %s, server", c.server, server.ParentSpanID(), server.GetKind(), c.parent)
		}
		c.attrs["rpc.system.name"], c.attrs["rpc.method"], c.attrs["rpc.response.status_code"] = "grpc", c.server, "OK"
		wantAttrs(t, c.server, server.Attrs(), c.attrs)
		wantAttrs(t, c.server+" resource", server.Resource, map[string]string{
			"service.name": "extauthz-test", "service.version": testVersion, "deployment.environment.name": "ci"})
		for _, name := range c.stores {
			store := findSpan(t, spans, name, c.traceID)
			if store.ParentSpanID() != server.SpanID() || store.GetKind().String() != "SPAN_KIND_CLIENT" {
				t.Errorf("%s in %s: parent %s, kind %v; want the server span %s, client", name, c.server, store.ParentSpanID(), store.GetKind(), server.SpanID())
			}
			wantAttrs(t, name, store.Attrs(), map[string]string{"extauthz.store.backend": "memory"})
		}
	}
	for _, kv := range recv.Every() {
		for _, secret := range []string{secretTenant, secretKey, secretKey2, "/orders/1", "/payments"} {
			if strings.Contains(kv, secret) {
				t.Errorf("exported attribute %q holds the request value %q", kv, secret)
			}
		}
	}
}

// findSpan returns the one span named name in trace traceID.
func findSpan(t *testing.T, spans []otlptest.Span, name, traceID string) otlptest.Span {
	t.Helper()
	var found []otlptest.Span
	for _, s := range spans {
		if s.GetName() == name && s.TraceID() == traceID {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		var all []string
		for _, s := range spans {
			all = append(all, s.GetName()+"@"+s.TraceID())
		}
		t.Fatalf("%d spans %s in trace %s, want 1; received %v", len(found), name, traceID, all)
	}
	return found[0]
}

func wantAttrs(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s = %q, want %q (all: %v)", what, k, got[k], v, got)
		}
	}
}
