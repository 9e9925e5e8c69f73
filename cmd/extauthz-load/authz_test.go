package main

import (
	"context"
	"sync/atomic"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
)

// fakeAuthz fails its first two calls, then admits the tenant "k0" and
// denies others with 429.
type fakeAuthz struct {
	authv3.UnimplementedAuthorizationServer
	calls atomic.Int64
}

func (f *fakeAuthz) Check(_ context.Context, r *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	if f.calls.Add(1) <= 2 {
		return nil, grpcstatus.Error(codes.Unavailable, "warming up")
	}
	if r.GetAttributes().GetRequest().GetHttp().GetHeaders()["x-tenant-id"] == "k0" {
		return &authv3.CheckResponse{Status: &status.Status{Code: int32(codes.OK)}}, nil
	}
	return &authv3.CheckResponse{
		Status: &status.Status{Code: int32(codes.ResourceExhausted)},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status: &typev3.HttpStatus{Code: typev3.StatusCode_TooManyRequests},
		}},
	}, nil
}

// TestAuthzModeWarmsUpUnrecorded: -api authz calls Check with the tenant
// header, counts 429 as over the limit, and leaves warm-up calls out: the
// two failed first calls (one per worker, at the start of the warm-up) are
// not in the report.
func TestAuthzModeWarmsUpUnrecorded(t *testing.T) {
	t.Parallel()
	for _, client := range clients {
		t.Run(client, func(t *testing.T) {
			t.Parallel()
			f := &fakeAuthz{}
			addr, _ := serveGRPC(t, func(s *grpc.Server) { authv3.RegisterAuthorizationServer(s, f) })
			r := runJSON(t, "-client", client, "-addr", addr, "-api", "authz", "-key", "x-tenant-id", "-keys", "2",
				"-concurrency", "2", "-warmup", "300ms", "-duration", "200ms")
			if r.OK == 0 || r.Over == 0 || r.Errors != 0 {
				t.Fatalf("report %+v, want admitted and 429 calls and no errors", r)
			}
		})
	}
}
