// Package otlptest is a real OTLP trace receiver for tests: the
// collector's gRPC TraceService, or OTLP/HTTP's POST /v1/traces with
// protobuf bodies, on a free loopback port. It keeps every span it is sent
// and counts the connections it accepted, so a test can check what a
// process (extauthz, Envoy) exported, and that it exported nothing.
package otlptest

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Protocols, as EXTAUTHZ_OTLP_PROTOCOL names them.
const (
	GRPC = "grpc"
	HTTP = "http/protobuf"
)

// Receiver receives OTLP traces until the test ends.
type Receiver struct {
	coltracepb.UnimplementedTraceServiceServer
	// Addr is host:port; URL is http://Addr, what EXTAUTHZ_OTLP_ENDPOINT takes.
	Addr, URL string
	conns     atomic.Int64
	mu        sync.Mutex
	reqs      []*coltracepb.ExportTraceServiceRequest
}

// Start serves protocol (GRPC or HTTP) until t ends.
func Start(t testing.TB, protocol string) *Receiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Receiver{Addr: ln.Addr().String()}
	r.URL = "http://" + r.Addr
	counted := &countingListener{Listener: ln, n: &r.conns}
	switch protocol {
	case GRPC:
		srv := grpc.NewServer()
		coltracepb.RegisterTraceServiceServer(srv, r)
		go func() { _ = srv.Serve(counted) }()
		t.Cleanup(srv.Stop)
	case HTTP:
		mux := http.NewServeMux()
		mux.HandleFunc("POST /v1/traces", r.serveHTTP)
		srv := &http.Server{Handler: mux}
		go func() { _ = srv.Serve(counted) }()
		t.Cleanup(func() { srv.Close() })
	default:
		t.Fatalf("otlptest: unknown protocol %q", protocol)
	}
	return r
}

// Conns is how many connections the receiver accepted.
func (r *Receiver) Conns() int64 { return r.conns.Load() }

// Export is the gRPC TraceService.
func (r *Receiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.keep(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// serveHTTP is OTLP/HTTP with protobuf bodies, gzip or not.
func (r *Receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want application/x-protobuf", http.StatusUnsupportedMediaType)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	var msg coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(b, &msg)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.keep(&msg)
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (r *Receiver) keep(req *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs = append(r.reqs, req)
}

// Span is one received span with its resource's attributes.
type Span struct {
	*tracepb.Span
	Resource map[string]string
}

// TraceID is the span's trace ID in hex.
func (s Span) TraceID() string { return hex.EncodeToString(s.GetTraceId()) }

// SpanID is the span's ID in hex.
func (s Span) SpanID() string { return hex.EncodeToString(s.GetSpanId()) }

// ParentSpanID is the parent span's ID in hex, "" for a root span.
func (s Span) ParentSpanID() string { return hex.EncodeToString(s.GetParentSpanId()) }

// Attrs returns the span's attributes as strings.
func (s Span) Attrs() map[string]string { return attrMap(s.GetAttributes()) }

// Service is the resource's service.name.
func (s Span) Service() string { return s.Resource["service.name"] }

// Spans returns every span received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Span
	for _, req := range r.reqs {
		for _, rs := range req.GetResourceSpans() {
			res := attrMap(rs.GetResource().GetAttributes())
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					out = append(out, Span{Span: s, Resource: res})
				}
			}
		}
	}
	return out
}

// Every returns "key=value" for each attribute of every span received, its
// events' and its resource's included: what a test searches for values
// that must never be exported.
func (r *Receiver) Every() []string {
	var out []string
	for _, s := range r.Spans() {
		for _, m := range []map[string]string{s.Attrs(), s.Resource} {
			for k, v := range m {
				out = append(out, k+"="+v)
			}
		}
		for _, ev := range s.GetEvents() {
			for k, v := range attrMap(ev.GetAttributes()) {
				out = append(out, k+"="+v)
			}
		}
	}
	return out
}

func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[kv.GetKey()] = anyValue(kv.GetValue())
	}
	return m
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

// countingListener counts the connections accepted.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}
