package adsclient_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/extauthz/extauthz/internal/adsclient"
)

const node = "n1"

// server is go-control-plane's xDS server with a snapshot cache.
type server struct {
	addr  string
	cache cachev3.SnapshotCache
	grpc  *grpc.Server
	done  chan struct{}

	mu      sync.Mutex
	nacks   []string
	nodes   []*corev3.Node
	headers []string // x-token values of opened streams
}

func serve(t *testing.T, addr string, cache cachev3.SnapshotCache) *server {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &server{addr: ln.Addr().String(), cache: cache, grpc: grpc.NewServer(), done: make(chan struct{})}
	cb := serverv3.CallbackFuncs{StreamOpenFunc: func(ctx context.Context, _ int64, _ string) error {
		md, _ := metadata.FromIncomingContext(ctx)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.headers = append(s.headers, md.Get("x-token")...)
		return nil
	}, StreamRequestFunc: func(_ int64, req *discoveryv3.DiscoveryRequest) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if req.GetNode() != nil {
			s.nodes = append(s.nodes, req.GetNode())
		}
		if req.GetErrorDetail() != nil {
			s.nacks = append(s.nacks, req.GetErrorDetail().GetMessage())
		}
		return nil
	}}
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(s.grpc, serverv3.NewServer(context.Background(), cache, cb))
	go func() { _ = s.grpc.Serve(ln); close(s.done) }()
	t.Cleanup(s.stop)
	return s
}

func (s *server) stop() { s.grpc.Stop(); <-s.done }

func (s *server) nacked(substr string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.nacks {
		if strings.Contains(n, substr) {
			return true
		}
	}
	return false
}

func set(t *testing.T, cache cachev3.SnapshotCache, version string, names ...string) {
	t.Helper()
	var res []types.Resource
	for _, n := range names {
		res = append(res, &rlsconfv3.RateLimitConfig{Name: n, Domain: n})
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		t.Fatal(err)
	}
	if err := cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
}

// applier keeps what Apply accepted; a resource named "bad" is refused.
type applier struct {
	mu      sync.Mutex
	version string
	names   []string
}

func (a *applier) apply(version string, res []*anypb.Any) error {
	var names []string
	for _, r := range res {
		c := &rlsconfv3.RateLimitConfig{}
		if err := r.UnmarshalTo(c); err != nil {
			return err
		}
		if c.GetName() == "bad" {
			return errors.New("resource bad: refused")
		}
		names = append(names, c.GetName())
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.version, a.names = version, names
	return nil
}

func (a *applier) current() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.version + ":" + strings.Join(a.names, ",")
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestClientAcksNacksAndReconnects(t *testing.T) {
	t.Parallel()
	cache := cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)
	s := serve(t, "127.0.0.1:0", cache)
	set(t, cache, "v1", "a")
	a := &applier{}
	c, err := adsclient.New(adsclient.Config{
		Target: s.addr, Node: &corev3.Node{Id: node, Cluster: "rl"}, TypeURL: resource.RateLimitConfigType,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, Apply: a.apply,
		Headers: map[string]string{"x-token": "secret"}, MaxRecvBytes: 1 << 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run = %v after cancel, want nil", err)
		}
	}()

	eventually(t, "v1", func() bool { return a.current() == "v1:a" })
	s.mu.Lock()
	first := s.nodes[0]
	s.mu.Unlock()
	if first.GetId() != node || first.GetCluster() != "rl" {
		t.Errorf("node %v, want id %s cluster rl", first, node)
	}
	s.mu.Lock()
	if len(s.headers) != 1 || s.headers[0] != "secret" {
		t.Errorf("stream headers x-token %v, want [secret]", s.headers)
	}
	s.mu.Unlock()

	set(t, cache, "v2", "a", "bad")
	eventually(t, "v2 NACKed with the error", func() bool { return s.nacked("resource bad: refused") })
	if got := a.current(); got != "v1:a" {
		t.Errorf("after a NACK the applied state is %q, want v1:a", got)
	}

	set(t, cache, "v3", "a", "b")
	eventually(t, "v3", func() bool { return a.current() == "v3:a,b" })

	// The server goes away and comes back on the same address.
	s.stop()
	cache2 := cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)
	set(t, cache2, "v4", "c")
	serve(t, s.addr, cache2)
	eventually(t, "v4 after the reconnect", func() bool { return a.current() == "v4:c" })
}

func TestNewRefusesAnIncompleteConfig(t *testing.T) {
	t.Parallel()
	apply := func(string, []*anypb.Any) error { return nil }
	for name, cfg := range map[string]adsclient.Config{
		"no target":  {Node: &corev3.Node{Id: "n"}, TypeURL: "t", Apply: apply},
		"no node id": {Target: "127.0.0.1:1", Node: &corev3.Node{}, TypeURL: "t", Apply: apply},
		"no type":    {Target: "127.0.0.1:1", Node: &corev3.Node{Id: "n"}, Apply: apply},
		"no apply":   {Target: "127.0.0.1:1", Node: &corev3.Node{Id: "n"}, TypeURL: "t"},
	} {
		if _, err := adsclient.New(cfg); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
}
