package authz

import (
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/idempotency"
)

// hostPolicy restricts an idempotency and rate-limited route to one
// service of a mesh; the same path on any other host matches no route.
const hostPolicy = `
http:
  tenant: {header: x-tenant-id, default: public}
  routes:
    - name: orders-a
      hosts: [orders.a.svc.cluster.local, "*.a.example.com"]
      path_prefix: /orders
      rate_limits: [{requests_per_unit: 2, unit: minute, name: per-tenant}]
      idempotency: {key_required: true}
`

const (
	hostA = "orders.a.svc.cluster.local"
	hostB = "orders.b.svc.cluster.local"
)

// postHost is an idempotent POST through ext_authz to host.
func (e *idemEnv) postHost(t *testing.T, host, key string) *authv3.CheckResponse {
	t.Helper()
	req := checkReq("POST", "/orders/1", []byte("{}"), "x-tenant-id", "acme", "idempotency-key", key)
	req.Attributes.Request.Http.Host = host
	return e.check(t, req)
}

// ext_authz: a route restricted to host A neither rate-limits nor takes a
// lease for the same path on host B, and still does both for host A.
func TestAuthzRouteHosts(t *testing.T) {
	e := startIdem(t, hostPolicy)
	for range 3 { // more than the limit of 2
		resp := e.postHost(t, hostB, "k")
		if resp.GetOkResponse() == nil || resp.GetDynamicMetadata() != nil {
			t.Fatalf("host B: got %v, want OK without a lease handoff", resp)
		}
	}
	if n := len(e.limits.Calls()); n != 0 {
		t.Fatalf("host B: %d rate-limit store calls, want 0", n)
	}
	if got := e.event(envoy.APIExtAuthz, idempotency.EventAcquired); got != 0 {
		t.Fatalf("host B: acquired = %v, want 0", got)
	}

	// Host A, with a port and in another case: the same key is free (B took
	// no lease), then in flight, then the tenant is over its limit.
	wantLease(t, e.postHost(t, "Orders.A.svc.cluster.local:8080", "k"), envoy.ActionLease)
	wantDenied(t, e.postHost(t, hostA, "k"), 409, ProblemInProgress)
	wantDenied(t, e.postHost(t, "x.a.example.com", "k"), 429, "")
	if n := len(e.limits.Calls()); n != 3 {
		t.Errorf("host A: %d rate-limit store calls, want 3", n)
	}
	// An empty host matches no host-restricted route.
	if resp := e.postHost(t, "", "k"); resp.GetOkResponse() == nil {
		t.Errorf("no host: denied %v, want OK (no route)", resp.GetDeniedResponse())
	}
}

// ext_proc wiring (a): a route restricted to host A takes no lease, stores
// and replays nothing for host B; host A (from :authority, or from the host
// header without one) gets the full lifecycle.
func TestExtProcRouteHosts(t *testing.T) {
	e := startIdem(t, hostPolicy)
	s, ir := e.postA(t, "/orders/1", "acme", "k", []byte("{}"), ":authority", hostB)
	if ir != nil {
		t.Fatalf("host B answered %d, want it to go upstream", ir.GetStatus().GetCode())
	}
	s.upstream(201, []byte("from B"), viaUpstream, 0)
	if got := e.event(apiExtProc, idempotency.EventAcquired) + e.event(apiExtProc, idempotency.EventStored); got != 0 {
		t.Fatalf("host B: acquired + stored = %v, want 0", got)
	}

	// Host A: the key is free, so the request runs and its response is stored.
	s, ir = e.postA(t, "/orders/1", "acme", "k", []byte("{}"), ":authority", hostA+":80")
	if ir != nil {
		t.Fatalf("host A answered %d, want it to go upstream (B must not hold the key)", ir.GetStatus().GetCode())
	}
	s.upstream(201, []byte("from A"), viaUpstream, 0)
	if got := e.event(apiExtProc, idempotency.EventStored); got != 1 {
		t.Fatalf("host A: stored = %v, want 1", got)
	}
	_, ir = e.postA(t, "/orders/1", "acme", "k", []byte("{}"), "host", hostA)
	wantReplayIR(t, ir, 201, []byte("from A"))

	// Host B still ignores the key: no replay of A's response.
	s, ir = e.postA(t, "/orders/1", "acme", "k", []byte("{}"), ":authority", hostB, "host", hostA)
	if ir != nil {
		t.Fatalf("host B (with a host header naming A) answered %d, want it to go upstream", ir.GetStatus().GetCode())
	}
	s.upstream(200, nil, viaUpstream, 0)
}
