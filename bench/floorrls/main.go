// Command floorrls is the floor of any grpc-go rate limit service: Envoy's
// ShouldRateLimit answered OK at once, with no decision, no store and no
// metrics, on a grpc-go server set up as extauthz's is for it (64 stream
// workers, GOGC 400 unless the environment sets GOGC). bench/peer.sh runs it
// beside extauthz and envoyproxy/ratelimit, so that every run shows how
// much of a server's CPU per call is grpc-go's own HTTP/2 and protobuf
// work, which no rate limit service built on it can shed.
//
//	floorrls 127.0.0.1:9099
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime/debug"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

// ok is the one answer: shared, since grpc-go only reads a reply.
var ok = &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}

type floor struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

func (floor) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return ok, nil
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: floorrls HOST:PORT")
		os.Exit(2)
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400) // extauthz's default (cmd/extauthz/gc.go)
	}
	lis, err := net.Listen("tcp", os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	s := grpc.NewServer(grpc.NumStreamWorkers(64)) // extauthz's EXTAUTHZ_GRPC_STREAM_WORKERS default
	rlsv3.RegisterRateLimitServiceServer(s, floor{})
	if err := s.Serve(lis); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
