package main

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// xdsNode is the node id every test's extauthz announces.
const xdsNode = "extauthz-test-node"

// xdsServer is go-control-plane's xDS server (the library Envoy Gateway's
// controller uses) with a snapshot cache, on a loopback port.
type xdsServer struct {
	addr  string
	cache cachev3.SnapshotCache
	grpc  *grpc.Server

	mu     sync.Mutex
	nacks  []string     // error_detail messages received
	acks   []string     // versions ACKed
	node   *corev3.Node // as first announced
	closed chan struct{}
}

// startXDS serves on addr ("127.0.0.1:0" for any port); creds nil is plaintext.
func startXDS(t *testing.T, addr string, creds credentials.TransportCredentials) *xdsServer {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	x := &xdsServer{addr: ln.Addr().String(), cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil), closed: make(chan struct{})}
	cb := serverv3.CallbackFuncs{StreamRequestFunc: func(_ int64, req *discoveryv3.DiscoveryRequest) error {
		x.mu.Lock()
		defer x.mu.Unlock()
		if req.GetNode() != nil && x.node == nil {
			x.node = req.GetNode()
		}
		switch {
		case req.GetErrorDetail() != nil:
			x.nacks = append(x.nacks, req.GetErrorDetail().GetMessage())
		case req.GetResponseNonce() != "":
			x.acks = append(x.acks, req.GetVersionInfo())
		}
		return nil
	}}
	var opts []grpc.ServerOption
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}
	x.grpc = grpc.NewServer(opts...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(x.grpc, serverv3.NewServer(context.Background(), x.cache, cb))
	go func() {
		_ = x.grpc.Serve(ln)
		close(x.closed)
	}()
	t.Cleanup(x.stop)
	return x
}

func (x *xdsServer) stop() {
	x.grpc.Stop()
	<-x.closed
}

// set publishes a snapshot of configs as version.
func (x *xdsServer) set(t *testing.T, version string, configs ...*rlsconfv3.RateLimitConfig) {
	t.Helper()
	x.setFor(t, xdsNode, version, configs...)
}

// setFor publishes a snapshot of configs as version for the node id node.
func (x *xdsServer) setFor(t *testing.T, node, version string, configs ...*rlsconfv3.RateLimitConfig) {
	t.Helper()
	res := make([]types.Resource, len(configs))
	for i, c := range configs {
		res[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
}

func (x *xdsServer) nacked(substr string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, n := range x.nacks {
		if strings.Contains(n, substr) {
			return true
		}
	}
	return false
}

// firstNode is the node of the first request, nil before one.
func (x *xdsServer) firstNode() *corev3.Node {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.node
}

func (x *xdsServer) acked(version string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, v := range x.acks {
		if v == version {
			return true
		}
	}
	return false
}

// gatewayLimit is one RateLimitConfig shaped like Envoy Gateway's
// translator output (testdata/out/ratelimit-config/*.yaml): the listener
// as domain, route and rule descriptors with key == value, the limit at
// the match descriptor.
func gatewayLimit(domain string, rpu uint32, unit rlsconfv3.RateLimitUnit) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{
		Name:   domain,
		Domain: domain,
		Descriptors: []*rlsconfv3.RateLimitDescriptor{{
			Key: "httproute/default/backend/rule/0", Value: "httproute/default/backend/rule/0",
			Descriptors: []*rlsconfv3.RateLimitDescriptor{{
				Key: "rule-0-match-0", Value: "rule-0-match-0",
				RateLimit: &rlsconfv3.RateLimitPolicy{RequestsPerUnit: rpu, Unit: unit},
			}},
		}},
	}
}

// gatewayStatus asks for the gateway descriptor of domain and returns its
// status (no current_limit when nothing matched).
func gatewayStatus(t *testing.T, client rlsv3.RateLimitServiceClient, domain string) *rlsv3.RateLimitResponse_DescriptorStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*commonrlv3.RateLimitDescriptor{{
		Entries: []*commonrlv3.RateLimitDescriptor_Entry{
			{Key: "httproute/default/backend/rule/0", Value: "httproute/default/backend/rule/0"},
			{Key: "rule-0-match-0", Value: "rule-0-match-0"},
		},
	}}})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp.GetStatuses()[0]
}

func xdsEnv(addr string, extra ...string) []string {
	return append([]string{"EXTAUTHZ_XDS_SERVER_URL=" + addr, "EXTAUTHZ_XDS_NODE_ID=" + xdsNode,
		"EXTAUTHZ_XDS_NODE_METADATA=cluster=ratelimit,zone=a", "EXTAUTHZ_XDS_BACKOFF_MIN=100ms", "EXTAUTHZ_XDS_BACKOFF_MAX=500ms"}, extra...)
}

func healthStatus(t *testing.T, p *proc) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(p.dial(t)).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("health check: %v", err)
	}
	return resp.GetStatus()
}

func TestBinaryFollowsPolicyOverXDS(t *testing.T) {
	x := startXDS(t, "127.0.0.1:0", nil)
	x.set(t, "v1", gatewayLimit("first-listener", 3, rlsconfv3.RateLimitUnit_MINUTE))
	// An EXTAUTHZ_CONFIG given: the xDS server wins.
	p := start(t, xdsEnv(x.addr, "EXTAUTHZ_CONFIG="+examplePolicy(t))...)
	eventually(t, "ready after the first update", func() bool { code, _ := p.get(t, "/readyz"); return code == 200 })
	client := rlsv3.NewRateLimitServiceClient(p.dial(t))
	if !strings.Contains(p.Logs(), "EXTAUTHZ_CONFIG is ignored") {
		t.Error("no warning that EXTAUTHZ_CONFIG is ignored")
	}

	x.mu.Lock()
	node := x.node
	x.mu.Unlock()
	if node.GetId() != xdsNode || node.GetMetadata().GetFields()["zone"].GetStringValue() != "a" {
		t.Errorf("the server saw node %v, want id %s with metadata zone=a", node, xdsNode)
	}

	// Decisions follow the snapshot; two of three hits are spent.
	for want := uint32(2); want >= 1; want-- {
		st := gatewayStatus(t, client, "first-listener")
		if st.GetCurrentLimit().GetRequestsPerUnit() != 3 || st.GetLimitRemaining() != want {
			t.Fatalf("v1: limit %d remaining %d, want 3 and %d", st.GetCurrentLimit().GetRequestsPerUnit(), st.GetLimitRemaining(), want)
		}
	}

	// An update keeping the limit's terms (another domain added) keeps its counter.
	x.set(t, "v2", gatewayLimit("first-listener", 3, rlsconfv3.RateLimitUnit_MINUTE), gatewayLimit("second-listener", 7, rlsconfv3.RateLimitUnit_HOUR))
	eventually(t, "v2 acked", func() bool { return x.acked("v2") })
	if st := gatewayStatus(t, client, "second-listener"); st.GetCurrentLimit().GetRequestsPerUnit() != 7 {
		t.Fatalf("v2: second-listener limit %d, want 7", st.GetCurrentLimit().GetRequestsPerUnit())
	}
	if st := gatewayStatus(t, client, "first-listener"); st.GetLimitRemaining() != 0 || st.GetCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("v2: first-listener %v remaining %d, want OK with 0 left (the counter survived)", st.GetCode(), st.GetLimitRemaining())
	}

	// A bad update is NACKed with its error and the last good policy decides.
	x.set(t, "v3", gatewayLimit("first-listener", 100, rlsconfv3.RateLimitUnit_UNKNOWN))
	eventually(t, "v3 nacked with its error", func() bool {
		return x.nacked("xds:RateLimitConfig/first-listener: descriptors[0].descriptors[0].rate_limit.unit: unknown unit")
	})
	if st := gatewayStatus(t, client, "first-listener"); st.GetCurrentLimit().GetRequestsPerUnit() != 3 || st.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("after a NACK: limit %d code %v, want the last good 3 and OVER_LIMIT", st.GetCurrentLimit().GetRequestsPerUnit(), st.GetCode())
	}
	if code, _ := p.get(t, "/readyz"); code != 200 {
		t.Errorf("/readyz = %d after a NACK, want 200", code)
	}

	// A changed limit serves without a restart.
	x.set(t, "v4", gatewayLimit("first-listener", 10, rlsconfv3.RateLimitUnit_MINUTE))
	eventually(t, "v4 to decide", func() bool {
		return gatewayStatus(t, client, "first-listener").GetCurrentLimit().GetRequestsPerUnit() == 10
	})
	// second-listener was removed with v4: it matches nothing any more.
	if st := gatewayStatus(t, client, "second-listener"); st.GetCurrentLimit() != nil || st.GetCode() != rlsv3.RateLimitResponse_OK {
		t.Errorf("removed domain: %v, want OK without a limit", st)
	}

	_, m := p.get(t, "/metrics")
	// A server may send a refused version again (go-control-plane does when
	// a stream restarts): each refusal counts.
	if applied := sample(m, `extauthz_policy_xds_updates_total{result="applied"}`); applied != "3" {
		t.Errorf("applied = %q, want 3\n%s", applied, grepLines(m, "xds_updates"))
	}
	if rejected := sample(m, `extauthz_policy_xds_updates_total{result="rejected"}`); rejected == "" || rejected == "0" {
		t.Errorf("rejected = %q, want at least 1\n%s", rejected, grepLines(m, "xds_updates"))
	}
	for _, want := range []string{`"msg":"xds policy applied","version":"v4"`, `"msg":"xds policy rejected; the last good policy stays in force","version":"v3"`} {
		if !strings.Contains(p.Logs(), want) {
			t.Errorf("logs lack %s", want)
		}
	}
}

// freeAddr returns a loopback address nothing listens on (yet).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestBinaryWaitsForXDSAndReconnects(t *testing.T) {
	addr := freeAddr(t)
	p := start(t, xdsEnv(addr)...)
	if code, body := p.get(t, "/readyz"); code != 503 || !strings.Contains(body, "no policy received over xDS") {
		t.Errorf("/readyz with the xDS server down = %d %q, want 503 naming the missing policy", code, body)
	}
	if st := healthStatus(t, p); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("gRPC health with the xDS server down = %v, want NOT_SERVING", st)
	}

	x := startXDS(t, addr, nil)
	x.set(t, "v1", gatewayLimit("first-listener", 3, rlsconfv3.RateLimitUnit_MINUTE))
	eventually(t, "ready once the server is up", func() bool { code, _ := p.get(t, "/readyz"); return code == 200 })
	eventually(t, "gRPC health SERVING", func() bool { return healthStatus(t, p) == healthpb.HealthCheckResponse_SERVING })
	client := rlsv3.NewRateLimitServiceClient(p.dial(t))
	if st := gatewayStatus(t, client, "first-listener"); st.GetCurrentLimit().GetRequestsPerUnit() != 3 {
		t.Fatalf("limit %d, want 3", st.GetCurrentLimit().GetRequestsPerUnit())
	}

	// The server restarts with a new snapshot: the client reconnects, and
	// the last good policy serves meanwhile.
	x.stop()
	if st := gatewayStatus(t, client, "first-listener"); st.GetCurrentLimit().GetRequestsPerUnit() != 3 {
		t.Fatalf("server down: limit %d, want the last good 3", st.GetCurrentLimit().GetRequestsPerUnit())
	}
	if code, _ := p.get(t, "/readyz"); code != 200 {
		t.Errorf("/readyz = %d with the xDS server gone after an update, want 200", code)
	}
	x2 := startXDS(t, addr, nil)
	x2.set(t, "v2", gatewayLimit("first-listener", 9, rlsconfv3.RateLimitUnit_MINUTE))
	eventually(t, "the restarted server's limit", func() bool {
		return gatewayStatus(t, client, "first-listener").GetCurrentLimit().GetRequestsPerUnit() == 9
	})
	if !strings.Contains(p.Logs(), "xds stream ended; reconnecting") {
		t.Error("logs lack the reconnect")
	}
}

func TestBinaryForceStartServesWithoutXDS(t *testing.T) {
	p := start(t, xdsEnv(freeAddr(t), "EXTAUTHZ_XDS_FORCE_START=true")...)
	if code, _ := p.get(t, "/readyz"); code != 200 {
		t.Errorf("/readyz = %d under EXTAUTHZ_XDS_FORCE_START, want 200", code)
	}
	if st := healthStatus(t, p); st != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health = %v under EXTAUTHZ_XDS_FORCE_START, want SERVING", st)
	}
	st := gatewayStatus(t, rlsv3.NewRateLimitServiceClient(p.dial(t)), "first-listener")
	if st.GetCode() != rlsv3.RateLimitResponse_OK || st.GetCurrentLimit() != nil {
		t.Errorf("no policy yet: %v, want OK without a limit", st)
	}
}

// sample returns the value of the series named exactly by series in a
// /metrics text, or "".
func sample(metrics, series string) string {
	for _, l := range strings.Split(metrics, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			return v
		}
	}
	return ""
}
