package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/extauthz/extauthz/internal/xdstest"
)

// xdsNode is the node id every test's extauthz announces.
const xdsNode = "extauthz-test-node"

// gatewayStatus asks for the gateway descriptor of domain and returns its
// status (no current_limit when nothing matched).
func gatewayStatus(t *testing.T, client rlsv3.RateLimitServiceClient, domain string) *rlsv3.RateLimitResponse_DescriptorStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*commonrlv3.RateLimitDescriptor{{
		Entries: []*commonrlv3.RateLimitDescriptor_Entry{
			{Key: xdstest.GatewayRouteKey, Value: xdstest.GatewayRouteKey},
			{Key: xdstest.GatewayMatchKey, Value: xdstest.GatewayMatchKey},
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
	x := xdstest.Start(t, "127.0.0.1:0", nil)
	x.Set(t, xdsNode, "v1", xdstest.GatewayLimit("first-listener", 3, rlsconfv3.RateLimitUnit_MINUTE))
	// An EXTAUTHZ_CONFIG given: the xDS server wins.
	p := start(t, xdsEnv(x.Addr, "EXTAUTHZ_CONFIG="+examplePolicy(t))...)
	eventually(t, "ready after the first update", func() bool { code, _ := p.get(t, "/readyz"); return code == 200 })
	client := rlsv3.NewRateLimitServiceClient(p.dial(t))
	if !strings.Contains(p.Logs(), "EXTAUTHZ_CONFIG is ignored") {
		t.Error("no warning that EXTAUTHZ_CONFIG is ignored")
	}

	if node := x.FirstNode(); node.GetId() != xdsNode || node.GetMetadata().GetFields()["zone"].GetStringValue() != "a" {
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
	x.Set(t, xdsNode, "v2", xdstest.GatewayLimit("first-listener", 3, rlsconfv3.RateLimitUnit_MINUTE), xdstest.GatewayLimit("second-listener", 7, rlsconfv3.RateLimitUnit_HOUR))
	eventually(t, "v2 acked", func() bool { return x.Acked("v2") })
	if st := gatewayStatus(t, client, "second-listener"); st.GetCurrentLimit().GetRequestsPerUnit() != 7 {
		t.Fatalf("v2: second-listener limit %d, want 7", st.GetCurrentLimit().GetRequestsPerUnit())
	}
	if st := gatewayStatus(t, client, "first-listener"); st.GetLimitRemaining() != 0 || st.GetCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("v2: first-listener %v remaining %d, want OK with 0 left (the counter survived)", st.GetCode(), st.GetLimitRemaining())
	}

	// A bad update is NACKed with its error and the last good policy decides.
	x.Set(t, xdsNode, "v3", xdstest.GatewayLimit("first-listener", 100, rlsconfv3.RateLimitUnit_UNKNOWN))
	eventually(t, "v3 nacked with its error", func() bool {
		return x.Nacked("xds:RateLimitConfig/first-listener: descriptors[0].descriptors[0].rate_limit.unit: unknown unit")
	})
	if st := gatewayStatus(t, client, "first-listener"); st.GetCurrentLimit().GetRequestsPerUnit() != 3 || st.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("after a NACK: limit %d code %v, want the last good 3 and OVER_LIMIT", st.GetCurrentLimit().GetRequestsPerUnit(), st.GetCode())
	}
	if code, _ := p.get(t, "/readyz"); code != 200 {
		t.Errorf("/readyz = %d after a NACK, want 200", code)
	}

	// A changed limit serves without a restart.
	x.Set(t, xdsNode, "v4", xdstest.GatewayLimit("first-listener", 10, rlsconfv3.RateLimitUnit_MINUTE))
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

	x := xdstest.Start(t, addr, nil)
	x.Set(t, xdsNode, "v1", xdstest.GatewayLimit("first-listener", 3, rlsconfv3.RateLimitUnit_MINUTE))
	eventually(t, "ready once the server is up", func() bool { code, _ := p.get(t, "/readyz"); return code == 200 })
	eventually(t, "gRPC health SERVING", func() bool { return healthStatus(t, p) == healthpb.HealthCheckResponse_SERVING })
	client := rlsv3.NewRateLimitServiceClient(p.dial(t))
	if st := gatewayStatus(t, client, "first-listener"); st.GetCurrentLimit().GetRequestsPerUnit() != 3 {
		t.Fatalf("limit %d, want 3", st.GetCurrentLimit().GetRequestsPerUnit())
	}

	// The server restarts with a new snapshot: the client reconnects, and
	// the last good policy serves meanwhile.
	x.Stop()
	if st := gatewayStatus(t, client, "first-listener"); st.GetCurrentLimit().GetRequestsPerUnit() != 3 {
		t.Fatalf("server down: limit %d, want the last good 3", st.GetCurrentLimit().GetRequestsPerUnit())
	}
	if code, _ := p.get(t, "/readyz"); code != 200 {
		t.Errorf("/readyz = %d with the xDS server gone after an update, want 200", code)
	}
	x2 := xdstest.Start(t, addr, nil)
	x2.Set(t, xdsNode, "v2", xdstest.GatewayLimit("first-listener", 9, rlsconfv3.RateLimitUnit_MINUTE))
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
