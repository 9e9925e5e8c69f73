package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
)

// clients are the -client values every behaviour is checked with.
var clients = []string{clientGRPC, clientH2}

// fakeRLS answers OK for the descriptor value "k0", fails "k2" with a gRPC
// status whose message needs percent-encoding, answers OVER_LIMIT
// otherwise, and counts calls.
type fakeRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
	calls atomic.Int64
}

func (f *fakeRLS) ShouldRateLimit(_ context.Context, r *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	f.calls.Add(1)
	entries := r.GetDescriptors()[0].GetEntries()
	switch entries[len(entries)-1].GetValue() {
	case "k0":
		return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}, nil
	case "k2":
		return nil, grpcstatus.Error(codes.FailedPrecondition, "domain 100% unknown")
	}
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT}, nil
}

// serveGRPC serves svc's registration on a loopback port until the test ends.
func serveGRPC(t *testing.T, register func(*grpc.Server)) (string, *grpc.Server) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	register(srv)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), srv
}

func serveFake(t *testing.T) (string, *fakeRLS) {
	t.Helper()
	f := &fakeRLS{}
	addr, _ := serveGRPC(t, func(s *grpc.Server) { rlsv3.RegisterRateLimitServiceServer(s, f) })
	return addr, f
}

// runJSON runs the tool with -json and returns its report.
func runJSON(t *testing.T, args ...string) report {
	t.Helper()
	var out bytes.Buffer
	if err := run(append(args, "-json"), &out); err != nil {
		t.Fatal(err)
	}
	var r report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("output %q: %v", out.String(), err)
	}
	return r
}

func TestRunCountsOutcomes(t *testing.T) {
	t.Parallel()
	for _, client := range clients {
		t.Run(client, func(t *testing.T) {
			t.Parallel()
			addr, f := serveFake(t)
			r := runJSON(t, "-client", client, "-addr", addr, "-keys", "2", "-concurrency", "4", "-duration", "300ms", "-entries", "tenant=acme")
			if r.Requests == 0 || r.OK == 0 || r.Over == 0 || r.Errors != 0 {
				t.Fatalf("report %+v, want OK and OVER_LIMIT calls and no errors", r)
			}
			if r.Requests != r.OK+r.Over || r.Requests > f.calls.Load() {
				t.Fatalf("report %+v inconsistent with %d server calls", r, f.calls.Load())
			}
			if r.P50 <= 0 || r.P99 < r.P50 || r.PerSecond <= 0 {
				t.Fatalf("report %+v: want positive, ordered percentiles and rate", r)
			}
		})
	}
}

// TestRunReportsStatusErrors: a call the server fails counts as an error
// whose gRPC code and (percent-decoded) message are the first error.
func TestRunReportsStatusErrors(t *testing.T) {
	t.Parallel()
	for _, client := range clients {
		t.Run(client, func(t *testing.T) {
			t.Parallel()
			addr, _ := serveFake(t)
			r := runJSON(t, "-client", client, "-addr", addr, "-keys", "3", "-concurrency", "3", "-duration", "200ms")
			if r.OK == 0 || r.Over == 0 || r.Errors == 0 {
				t.Fatalf("report %+v, want OK, OVER_LIMIT and failed calls", r)
			}
			if want := "code = FailedPrecondition desc = domain 100% unknown"; !strings.Contains(r.FirstErr, want) {
				t.Fatalf("first error %q, want it to contain %q", r.FirstErr, want)
			}
		})
	}
}

func TestRunCountsErrors(t *testing.T) {
	t.Parallel()
	for _, client := range clients {
		t.Run(client, func(t *testing.T) {
			t.Parallel()
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := lis.Addr().String()
			lis.Close() // nothing listens: every call fails
			var out bytes.Buffer
			if err := run([]string{"-client", client, "-addr", addr, "-duration", "200ms", "-timeout", "50ms", "-concurrency", "2"}, &out); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), "ok=0 over_limit=0 errors=") || strings.Contains(out.String(), "errors=0") {
				t.Fatalf("output %q, want only errors", out.String())
			}
		})
	}
}

func TestFlagsAreBounded(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-duration", "11m"},
		{"-duration", "0s"},
		{"-keys", "0"},
		{"-concurrency", "0"},
		{"-entries", "novalue"},
		{"-timeout", "-1s"},
		{"-warmup", "-1s"},
		{"-api", "grpc"},
		{"-client", "http"},
	} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("parseFlags(%q) accepted", args)
		}
	}
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	d := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if p := percentile(d, 50); p != 5 {
		t.Errorf("p50 = %v, want 5", p)
	}
	if p := percentile(d, 99); p != 10 {
		t.Errorf("p99 = %v, want 10", p)
	}
	if p := percentile(nil, 99); p != 0 {
		t.Errorf("p99 of nothing = %v", p)
	}
}
