package main

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// TestRequestHeadersIndexAsEnvoy: the first block adds the fields to the
// server's table; the steady block decodes, after it, to the same fields
// with every field but :path one indexed byte, as Envoy 1.40 sends them.
func TestRequestHeadersIndexAsEnvoy(t *testing.T) {
	blocks := requestHeaders(pathShouldRateLimit, "127.0.0.1:8081", 1500*time.Millisecond)
	var got []hpack.HeaderField
	dec := hpack.NewDecoder(4096, func(f hpack.HeaderField) { got = append(got, f) })
	if _, err := dec.Write(blocks.first); err != nil {
		t.Fatal(err)
	}
	first := got
	got = nil
	if _, err := dec.Write(blocks.steady); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(first) || len(got) != 10 {
		t.Fatalf("steady block has %d fields, first %d; want 10 each", len(got), len(first))
	}
	want := map[string]string{":path": pathShouldRateLimit, "grpc-timeout": "1500m", "x-envoy-expected-rq-timeout-ms": "1500", "te": "trailers"}
	for i, f := range got {
		if f.Name != first[i].Name || f.Value != first[i].Value {
			t.Errorf("field %d: steady %q=%q, first %q=%q", i, f.Name, f.Value, first[i].Name, first[i].Value)
		}
		if v, ok := want[f.Name]; ok && v != f.Value {
			t.Errorf("%s = %q, want %q", f.Name, f.Value, v)
		}
	}
	var path bytes.Buffer
	_ = hpack.NewEncoder(&path).WriteField(hpack.HeaderField{Name: ":path", Value: pathShouldRateLimit, Sensitive: true})
	if n := len(blocks.steady); n != 9+path.Len() {
		t.Fatalf("steady block is %d bytes, want 9 indexed fields and the %d-byte :path literal", n, path.Len())
	}
}

// metaRLS records each call's deadline and one header Envoy adds.
type metaRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
	mu        sync.Mutex
	calls     int
	deadlines int // calls whose context had a deadline within 5 s
	internal  int // calls with x-envoy-internal: true
}

func (f *metaRLS) ShouldRateLimit(ctx context.Context, _ *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	d, ok := ctx.Deadline()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if ok && time.Until(d) <= 5*time.Second {
		f.deadlines++
	}
	if v := md.Get("x-envoy-internal"); len(v) == 1 && v[0] == "true" {
		f.internal++
	}
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}, nil
}

// TestH2SendsEnvoysHeaders: through grpc-go's server, every call (the
// first, which fills the table, and the indexed ones after it) decodes,
// carries the -timeout as its deadline, and Envoy's internal-call header.
func TestH2SendsEnvoysHeaders(t *testing.T) {
	t.Parallel()
	f := &metaRLS{}
	addr, _ := serveGRPC(t, func(s *grpc.Server) { rlsv3.RegisterRateLimitServiceServer(s, f) })
	r := runJSON(t, "-client", clientH2, "-addr", addr, "-keys", "10", "-concurrency", "8",
		"-duration", "200ms", "-timeout", "5s")
	if r.Errors != 0 || r.OK < 10 {
		t.Fatalf("report %+v, want only OK calls", r)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls != int(r.Requests) || f.deadlines != f.calls || f.internal != f.calls {
		t.Fatalf("%d calls (report %d): %d with the -timeout as deadline, %d with x-envoy-internal", f.calls, r.Requests, f.deadlines, f.internal)
	}
}
