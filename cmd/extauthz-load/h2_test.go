package main

import (
	"context"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

// padding makes each request and each response about 1 KiB, so a few
// hundred calls cross the 64 KiB windows of both directions.
var padding = strings.Repeat("p", 1000)

// bigRLS answers OK with a 1 KiB header to add, and counts calls.
type bigRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
	calls atomic.Int64
}

func (f *bigRLS) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	f.calls.Add(1)
	return &rlsv3.RateLimitResponse{
		OverallCode:          rlsv3.RateLimitResponse_OK,
		ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "x-pad", Value: padding}},
	}, nil
}

// TestH2FlowControl: far more than 64 KiB each way at concurrency 64, and
// every call answered and counted once. The server counts a call before it
// answers, and each call's deadline is its own, not the run's, so the
// calls in flight when the run ends still complete and are counted: the
// server's count equals the report's exactly.
func TestH2FlowControl(t *testing.T) {
	t.Parallel()
	f := &bigRLS{}
	addr, _ := serveGRPC(t, func(s *grpc.Server) { rlsv3.RegisterRateLimitServiceServer(s, f) })
	r := runJSON(t, "-client", clientH2, "-addr", addr, "-keys", "100", "-concurrency", "64",
		"-duration", "500ms", "-timeout", "5s", "-entries", "pad="+padding)
	if r.Errors != 0 || r.OK != r.Requests {
		t.Fatalf("report %+v, want only OK calls", r)
	}
	if r.Requests*int64(len(padding)) < 4*65535 {
		t.Fatalf("%d calls of about %d bytes each way, want more than 4 windows", r.Requests, len(padding))
	}
	if got := f.calls.Load(); got != r.Requests {
		t.Fatalf("server answered %d calls, the report counts %d", got, r.Requests)
	}
}

// hangRLS never answers "k1" and reports each such call's cancellation;
// it answers OK otherwise.
type hangRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
	canceled chan struct{}
}

func (f *hangRLS) ShouldRateLimit(ctx context.Context, r *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if r.GetDescriptors()[0].GetEntries()[0].GetValue() == "k1" {
		<-ctx.Done()
		select {
		case f.canceled <- struct{}{}:
		default:
		}
		return nil, ctx.Err()
	}
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}, nil
}

// TestCallTimeout: a call not answered within -timeout fails with a
// deadline error, the others succeed, and the server sees the call
// canceled while the run goes on (the client reset the stream).
func TestCallTimeout(t *testing.T) {
	t.Parallel()
	for _, client := range clients {
		t.Run(client, func(t *testing.T) {
			t.Parallel()
			f := &hangRLS{canceled: make(chan struct{}, 1)}
			addr, _ := serveGRPC(t, func(s *grpc.Server) { rlsv3.RegisterRateLimitServiceServer(s, f) })
			done := make(chan report, 1)
			go func() {
				done <- runJSON(t, "-client", client, "-addr", addr, "-keys", "2", "-concurrency", "2",
					"-duration", "1s", "-timeout", "50ms")
			}()
			select { // during the run: closing the connection at its end would cancel too
			case <-f.canceled:
			case <-done:
				t.Fatal("the server saw no timed-out call canceled during the run")
			}
			r := <-done
			if r.OK == 0 || r.Errors == 0 || !strings.Contains(r.FirstErr, "DeadlineExceeded") {
				t.Fatalf("report %+v, want OK calls and deadline errors", r)
			}
		})
	}
}

// stopRLS answers OK and stops its server at the 200th call.
type stopRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
	calls atomic.Int64
	stop  func()
}

func (f *stopRLS) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if f.calls.Add(1) == 200 {
		go f.stop()
	}
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}, nil
}

// TestH2ServerStops: a server that goes away mid-run, abruptly or with
// GOAWAY, fails the calls and the tool still returns.
func TestH2ServerStops(t *testing.T) {
	t.Parallel()
	for name, stop := range map[string]func(*grpc.Server){
		"stop":     (*grpc.Server).Stop,
		"graceful": (*grpc.Server).GracefulStop,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := &stopRLS{}
			addr, srv := serveGRPC(t, func(s *grpc.Server) { rlsv3.RegisterRateLimitServiceServer(s, f) })
			f.stop = func() { stop(srv) }
			done := make(chan report, 1)
			go func() {
				done <- runJSON(t, "-client", clientH2, "-addr", addr, "-keys", "2", "-concurrency", "8",
					"-duration", "1s", "-timeout", "100ms")
			}()
			select {
			case r := <-done:
				if r.OK == 0 || r.Errors == 0 || r.FirstErr == "" {
					t.Fatalf("report %+v, want OK calls, then failed ones", r)
				}
				t.Logf("report %+v", r)
			case <-time.After(20 * time.Second):
				t.Fatal("the tool did not return after the server stopped")
			}
		})
	}
}

// busyRLS answers OK and records the most calls it had in flight at once.
type busyRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
	inFlight, most atomic.Int64
}

func (f *busyRLS) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	n := f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	for m := f.most.Load(); n > m && !f.most.CompareAndSwap(m, n); m = f.most.Load() {
	}
	runtime.Gosched() // let other calls overlap this one
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}, nil
}

// TestH2MaxConcurrentStreams: 64 callers against a server that allows 4
// streams at once: the client keeps to the limit (grpc-go refuses a stream
// above it, which would count as an error) and every call succeeds.
func TestH2MaxConcurrentStreams(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.MaxConcurrentStreams(4))
	f := &busyRLS{}
	rlsv3.RegisterRateLimitServiceServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	r := runJSON(t, "-client", clientH2, "-addr", lis.Addr().String(), "-concurrency", "64", "-duration", "300ms")
	if r.OK == 0 || r.Errors != 0 || f.most.Load() > 4 {
		t.Fatalf("report %+v, %d calls in flight at most; want only OK calls, at most 4 at once", r, f.most.Load())
	}
}
