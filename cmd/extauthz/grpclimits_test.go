package main

import (
	"context"
	"net"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/authz"
	idemmem "github.com/extauthz/extauthz/pkg/idempotency/memstore"
	"github.com/extauthz/extauthz/pkg/policy"
)

// TestGRPCLimitsCarryLargeBodies: with the default limits a 5 MB buffered
// body reaches ext_proc (gRPC's own 4 MiB default refused it with
// ResourceExhausted and left the key locked); with gRPC's default it is
// refused, so the test would notice the limits not being applied.
func TestGRPCLimitsCarryLargeBodies(t *testing.T) {
	t.Parallel()
	recv, send := Config{}.grpcMessageLimits()
	body := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: make([]byte, 5_000_000), EndOfStream: true}}}
	if err := processOnce(t, body, grpc.MaxRecvMsgSize(recv), grpc.MaxSendMsgSize(send)); err != nil {
		t.Fatalf("5 MB body with the default limits: %v", err)
	}
	if err := processOnce(t, body); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("5 MB body with gRPC's defaults: %v, want ResourceExhausted", err)
	}
}

// processOnce serves ext_proc with opts and sends one message.
func processOnce(t *testing.T, req *extprocv3.ProcessingRequest, opts ...grpc.ServerOption) error {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := envoy.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	events, err := authz.NewIdempotencyMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := authz.NewExtProc(idemmem.New(idemmem.Config{}), envoy.PolicyFunc(func() *policy.Policy { return nil }), m, events)
	if err != nil {
		t.Fatal(err)
	}
	g, _ := newGRPCServer([]grpcService{ep}, opts...)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
	if err != nil {
		return err
	}
	if err := stream.Send(req); err != nil {
		return err
	}
	_, err = stream.Recv()
	return err
}
