package e2e

import (
	"context"
	"encoding/hex"
	"net"
	"strconv"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// otlpReceiver is a real OTLP/gRPC trace receiver (the collector's
// TraceService) on a loopback port, keeping every span it is sent. A copy,
// gRPC only, of cmd/extauthz's (test files cannot be imported).
type otlpReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	addr string // host:port
	mu   sync.Mutex
	got  []span
}

// span is one received span with its resource's service.name.
type span struct {
	*tracepb.Span
	service string
}

func (s span) traceID() string  { return hex.EncodeToString(s.GetTraceId()) }
func (s span) spanID() string   { return hex.EncodeToString(s.GetSpanId()) }
func (s span) parentID() string { return hex.EncodeToString(s.GetParentSpanId()) }

// attr returns the span's attribute key as a string ("" when absent).
func (s span) attr(key string) string {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			return anyValue(kv.GetValue())
		}
	}
	return ""
}

// startOTLPReceiver serves until the test ends.
func startOTLPReceiver(t testing.TB) *otlpReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{addr: ln.Addr().String()}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, r)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return r
}

// Export is the gRPC TraceService.
func (r *otlpReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		var service string
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = anyValue(kv.GetValue())
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.got = append(r.got, span{Span: s, service: service})
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// spans returns every span received so far.
func (r *otlpReceiver) spans() []span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]span(nil), r.got...)
}

func anyValue(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	}
	return v.String()
}
