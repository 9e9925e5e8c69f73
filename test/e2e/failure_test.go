package e2e

import (
	"net/http"
	"testing"
)

// extauthz down (nothing listens on its port): Envoy does what
// envoy/front-proxy.yaml says. The ratelimit filter fails open (its error is
// counted as failure_mode_allowed), ext_authz fails closed with 503, ext_proc
// (wiring a) fails closed with 503; the exempt health path still works, and
// no request reached the upstream without its checks.
func TestExtauthzDown(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOpts{noExtauthz: true})
	tenant := uniq("down")

	if r := s.do(t, req{path: "/healthz"}); r.status != http.StatusOK {
		t.Errorf("/healthz: got %s, want 200", r)
	}
	cases := []struct {
		name string
		req  req
	}{
		{"ext_authz route", req{path: "/things", header: map[string]string{"x-tenant-id": tenant}}},
		{"wiring b", req{method: http.MethodPost, path: "/orders", body: []byte(`{}`),
			header: map[string]string{"x-tenant-id": tenant, "idempotency-key": uniq("k")}}},
		{"wiring a", req{method: http.MethodPost, path: "/payments", body: []byte(`{}`),
			header: map[string]string{"x-tenant-id": tenant, "idempotency-key": uniq("k")}}},
	}
	for _, c := range cases {
		if r := s.do(t, c.req); r.status != http.StatusServiceUnavailable {
			t.Errorf("%s: got %s, want 503", c.name, r)
		}
	}
	if n := s.up.Total(); n != 0 {
		t.Errorf("upstream executed %d requests, want 0", n)
	}
	// Three requests had descriptors: each RLS call failed and was let through.
	if n := s.envoyStat(t, "cluster.upstream.ratelimit.failure_mode_allowed"); n != 3 {
		t.Errorf("ratelimit failure_mode_allowed = %d, want 3", n)
	}
	if n := s.envoyStat(t, "http.ingress.ext_authz.extauthz.error"); n != 2 {
		t.Errorf("ext_authz errors = %d, want 2", n)
	}
}
