package main

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

// otlpReceiver is a real OTLP trace receiver on a loopback port: the
// collector's gRPC TraceService, or OTLP/HTTP's POST /v1/traces with
// protobuf bodies. It keeps every request and counts the connections it
// accepted.
type otlpReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	url   string // what EXTAUTHZ_OTLP_ENDPOINT takes
	conns atomic.Int64
	mu    sync.Mutex
	reqs  []*coltracepb.ExportTraceServiceRequest
}

// startOTLPReceiver serves protocol ("grpc" or "http/protobuf") until the
// test ends.
func startOTLPReceiver(t *testing.T, protocol string) *otlpReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{url: "http://" + ln.Addr().String()}
	counted := &countingListener{Listener: ln, n: &r.conns}
	switch protocol {
	case "grpc":
		srv := grpc.NewServer()
		coltracepb.RegisterTraceServiceServer(srv, r)
		go func() { _ = srv.Serve(counted) }()
		t.Cleanup(srv.Stop)
	default:
		mux := http.NewServeMux()
		mux.HandleFunc("POST /v1/traces", r.serveHTTP)
		srv := &http.Server{Handler: mux}
		go func() { _ = srv.Serve(counted) }()
		t.Cleanup(func() { srv.Close() })
	}
	return r
}

// Export is the gRPC TraceService.
func (r *otlpReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.keep(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// serveHTTP is OTLP/HTTP with protobuf bodies, gzip or not.
func (r *otlpReceiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
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

func (r *otlpReceiver) keep(req *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs = append(r.reqs, req)
}

// receivedSpan is one exported span with its resource's attributes.
type receivedSpan struct {
	*tracepb.Span
	resource map[string]string
}

func (s receivedSpan) traceID() string      { return hex.EncodeToString(s.GetTraceId()) }
func (s receivedSpan) spanID() string       { return hex.EncodeToString(s.GetSpanId()) }
func (s receivedSpan) parentSpanID() string { return hex.EncodeToString(s.GetParentSpanId()) }

// attrs returns the span's attributes as strings.
func (s receivedSpan) attrs() map[string]string { return attrMap(s.GetAttributes()) }

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
		if x.BoolValue {
			return "true"
		}
		return "false"
	}
	return v.String()
}

// spans returns every span received so far.
func (r *otlpReceiver) spans() []receivedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []receivedSpan
	for _, req := range r.reqs {
		for _, rs := range req.GetResourceSpans() {
			res := attrMap(rs.GetResource().GetAttributes())
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					out = append(out, receivedSpan{Span: s, resource: res})
				}
			}
		}
	}
	return out
}

// every returns each attribute value of every span received, its events'
// and its resource's included.
func (r *otlpReceiver) every() []string {
	var out []string
	for _, s := range r.spans() {
		for _, m := range []map[string]string{s.attrs(), s.resource} {
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
