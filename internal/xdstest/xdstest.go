// Package xdstest is the xDS management server that tests talk to:
// go-control-plane's ADS server (the library Envoy Gateway's controller
// uses) over a snapshot cache, on a loopback port, in plaintext, TLS or
// mutual TLS. It records what clients send (the versions they ACK, the
// error details of their NACKs, the nodes they announce, their stream
// metadata), so a test can wait for a snapshot to be taken or refused.
//
// GatewayLimit builds RateLimitConfig resources shaped like Envoy Gateway's
// translator output (internal/xds/translator/testdata/out/ratelimit-config
// in envoyproxy/gateway).
package xdstest

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
)

// Server is a running xDS server. Safe for concurrent use.
type Server struct {
	// Addr is the host:port it listens on.
	Addr string

	cache cachev3.SnapshotCache
	grpc  *grpc.Server
	done  chan struct{}

	mu    sync.Mutex
	acks  []string       // versions ACKed
	nacks []string       // error_detail messages of NACKs
	nodes []*corev3.Node // as announced, in order
	md    []metadata.MD  // of each stream opened
}

// Start serves on addr ("127.0.0.1:0" for any free port; a stopped
// server's Addr to come back where it was) until Stop or the test's end;
// creds nil is plaintext.
func Start(tb testing.TB, addr string, creds credentials.TransportCredentials) *Server {
	tb.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	s := &Server{Addr: ln.Addr().String(), cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil), done: make(chan struct{})}
	var opts []grpc.ServerOption
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}
	s.grpc = grpc.NewServer(opts...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(s.grpc, serverv3.NewServer(context.Background(), s.cache, s.callbacks()))
	go func() {
		_ = s.grpc.Serve(ln)
		close(s.done)
	}()
	tb.Cleanup(s.Stop)
	return s
}

// callbacks record each stream's metadata and each request's node, ACK or
// NACK.
func (s *Server) callbacks() serverv3.CallbackFuncs {
	return serverv3.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, _ int64, _ string) error {
			md, _ := metadata.FromIncomingContext(ctx)
			s.mu.Lock()
			defer s.mu.Unlock()
			s.md = append(s.md, md)
			return nil
		},
		StreamRequestFunc: func(_ int64, req *discoveryv3.DiscoveryRequest) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			if req.GetNode() != nil {
				s.nodes = append(s.nodes, req.GetNode())
			}
			switch {
			case req.GetErrorDetail() != nil:
				s.nacks = append(s.nacks, req.GetErrorDetail().GetMessage())
			case req.GetResponseNonce() != "":
				s.acks = append(s.acks, req.GetVersionInfo())
			}
			return nil
		},
	}
}

// Stop closes the listener and every stream. Safe to call twice.
func (s *Server) Stop() {
	s.grpc.Stop()
	<-s.done
}

// Set publishes configs as snapshot version for the node id node: a
// client of that node gets them next (a new version on its open stream).
func (s *Server) Set(tb testing.TB, node, version string, configs ...*rlsconfv3.RateLimitConfig) {
	tb.Helper()
	res := make([]types.Resource, len(configs))
	for i, c := range configs {
		res[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		tb.Fatal(err)
	}
}

// Acked reports whether a client ACKed version.
func (s *Server) Acked(version string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.acks, version)
}

// Acks counts the ACKs of version, from every client (a fleet of
// replicas ACKs once each).
func (s *Server) Acks(version string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, v := range s.acks {
		if v == version {
			n++
		}
	}
	return n
}

// Nacks counts the NACKs whose error detail contains substr.
func (s *Server) Nacks(substr string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, m := range s.nacks {
		if strings.Contains(m, substr) {
			n++
		}
	}
	return n
}

// Nacked reports whether a client NACKed a version with an error detail
// containing substr.
func (s *Server) Nacked(substr string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.ContainsFunc(s.nacks, func(n string) bool { return strings.Contains(n, substr) })
}

// Nodes are the nodes announced so far, in order.
func (s *Server) Nodes() []*corev3.Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.nodes)
}

// FirstNode is the node of the first request, nil before one.
func (s *Server) FirstNode() *corev3.Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.nodes) == 0 {
		return nil
	}
	return s.nodes[0]
}

// Header is the values of the metadata key sent by every stream opened so
// far, in order.
func (s *Server) Header(key string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, md := range s.md {
		out = append(out, md.Get(key)...)
	}
	return out
}

// Envoy Gateway's names for one rule of one HTTPRoute: the route's rule
// descriptor, a BackendTrafficPolicy's rule under it (GatewayDistinctLimit),
// and the match descriptor that carries the limit.
const (
	GatewayRouteKey      = "httproute/default/backend/rule/0"
	GatewayPolicyRuleKey = "default/backend-ratelimit/rule/0"
	GatewayMatchKey      = "rule-0-match-0"
)

// GatewayLimit is one RateLimitConfig shaped like Envoy Gateway's
// translator output: the listener as name and domain, route and rule
// descriptors whose value equals their key, the limit at the match
// descriptor.
func GatewayLimit(domain string, rpu uint32, unit rlsconfv3.RateLimitUnit) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{
		Name:   domain,
		Domain: domain,
		Descriptors: []*rlsconfv3.RateLimitDescriptor{{
			Key: GatewayRouteKey, Value: GatewayRouteKey,
			Descriptors: []*rlsconfv3.RateLimitDescriptor{{
				Key: GatewayMatchKey, Value: GatewayMatchKey,
				RateLimit: &rlsconfv3.RateLimitPolicy{RequestsPerUnit: rpu, Unit: unit},
			}},
		}},
	}
}

// GatewayDistinctLimit is the RateLimitConfig Envoy Gateway emits for a
// rule whose client selector is a header with type Distinct (a budget for
// each of its values; testdata/out/ratelimit-config/distinct-match.yaml):
// the route, the policy's rule, then the match descriptor with no value.
// Envoy sends it with the route actions generic_key (GatewayRouteKey),
// generic_key (GatewayPolicyRuleKey) and request_headers (the header, as
// GatewayMatchKey).
func GatewayDistinctLimit(domain string, rpu uint32, unit rlsconfv3.RateLimitUnit) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{
		Name:   domain,
		Domain: domain,
		Descriptors: []*rlsconfv3.RateLimitDescriptor{{
			Key: GatewayRouteKey, Value: GatewayRouteKey,
			Descriptors: []*rlsconfv3.RateLimitDescriptor{{
				Key: GatewayPolicyRuleKey, Value: GatewayPolicyRuleKey,
				Descriptors: []*rlsconfv3.RateLimitDescriptor{{
					Key:       GatewayMatchKey,
					RateLimit: &rlsconfv3.RateLimitPolicy{RequestsPerUnit: rpu, Unit: unit},
				}},
			}},
		}},
	}
}
