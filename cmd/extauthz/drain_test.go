package main

import (
	"context"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
)

// TestBinaryDrainsOnSIGTERM drives the real binary through a drain: on
// SIGTERM health turns NOT_SERVING at once (Check, Watch and /readyz) while
// every API keeps serving, new connections included, for the whole drain
// delay; then the listener closes, an open stream still finishes, the
// Watch stream ends with UNAVAILABLE, and the process exits 0 as soon as
// the last call is done.
func TestBinaryDrainsOnSIGTERM(t *testing.T) {
	const drain = 3 * time.Second
	p := start(t, "EXTAUTHZ_CONFIG="+examplePolicy(t), "EXTAUTHZ_DRAIN_DELAY="+drain.String())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := p.dial(t)
	watch, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st := recvStatus(t, watch); st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Watch before SIGTERM: %s, want SERVING", st)
	}
	// An in-flight stream that must survive the end of the drain delay.
	inflight, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}

	sigterm := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if st := recvStatus(t, watch); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("Watch after SIGTERM: %s, want NOT_SERVING", st)
	}
	notServing := time.Since(sigterm)
	checkDraining(t, ctx, p)
	if elapsed := time.Since(sigterm); elapsed >= drain {
		t.Fatalf("the checks during the drain took %v, longer than the drain delay %v: the machine is too slow for this test", elapsed, drain)
	}

	// The drain delay ends: the Watch stream is closed for the client to go elsewhere.
	_, err = watch.Recv()
	stopped := time.Since(sigterm)
	if status.Code(err) != codes.Unavailable {
		t.Errorf("Watch at the end of the drain: %v, want UNAVAILABLE", err)
	}
	if stopped < drain {
		t.Errorf("stopped accepting %v after SIGTERM, before the drain delay %v", stopped, drain)
	}
	if c, err := net.DialTimeout("tcp", p.grpcAddr, time.Second); err == nil {
		c.Close()
		t.Error("the gRPC port still accepts connections after the drain delay")
	}
	// The stream opened before SIGTERM is still served, then closes.
	if err := inflight.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatalf("in-flight stream after the drain: %v", err)
	}
	if _, err := inflight.Recv(); err != nil {
		t.Fatalf("in-flight stream after the drain: %v", err)
	}
	closed := time.Now()
	_ = inflight.CloseSend()
	p.waitCleanExit(t, 4*time.Second, "after the last call ended")
	t.Logf("NOT_SERVING after %v, stopped accepting after %v, exited %v after the last call", notServing.Round(time.Millisecond), stopped.Round(time.Millisecond), time.Since(closed).Round(time.Millisecond))
}

func recvStatus(t *testing.T, w healthpb.Health_WatchClient) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	r, err := w.Recv()
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	return r.GetStatus()
}

// checkDraining: probes fail, every service is NOT_SERVING, and the RLS
// still answers, on an existing connection and on a new one.
func checkDraining(t *testing.T, ctx context.Context, p *proc) {
	t.Helper()
	if code, body := p.get(t, "/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz while draining = %d %q, want 503", code, body)
	}
	fresh := p.dial(t) // a connection opened while draining
	for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService", "envoy.service.auth.v3.Authorization", "envoy.service.ext_proc.v3.ExternalProcessor"} {
		h, err := healthpb.NewHealthClient(fresh).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("health %q while draining = %v, %v; want NOT_SERVING", svc, h, err)
		}
	}
	shouldRateLimit(t, ctx, fresh)
}

func shouldRateLimit(t *testing.T, ctx context.Context, conn *grpc.ClientConn) {
	t.Helper()
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain: "edge",
		Descriptors: []*commonrlv3.RateLimitDescriptor{{Entries: []*commonrlv3.RateLimitDescriptor_Entry{
			{Key: "tenant", Value: "drain"}, {Key: "route", Value: "orders"},
		}}},
	})
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Errorf("ShouldRateLimit while draining = %v, %v; want OK", resp, err)
	}
}
