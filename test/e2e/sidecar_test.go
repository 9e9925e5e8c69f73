package e2e

import (
	"net/http"
	"testing"

	"github.com/extauthz/extauthz/test/e2e/upstream"
)

// TestSidecar runs envoy/sidecar.yaml as shipped (as_shipped) and the
// hostile identities that reach extauthz as raw headers behind it.
func TestSidecar(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOpts{config: "sidecar.yaml"})
	t.Run("as_shipped", func(t *testing.T) {
		t.Parallel()
		testSidecarAsShipped(t, s)
	})
	t.Run("hostile", func(t *testing.T) {
		for _, sc := range sidecarHostileScenarios {
			t.Run(sc.name, func(t *testing.T) {
				t.Parallel()
				sc.run(t, s)
			})
		}
	})
}

// The probe path is exempt, an idempotent POST is replayed (wiring b on the
// catch-all route), and the tenant's 10/minute budget ends in a 429.
func testSidecarAsShipped(t *testing.T, s *stack) {
	tenant, key := uniq("side"), uniq("key")
	w := wiring{"sidecar", "/sidecar"}

	first := s.do(t, post(w, tenant, key, `{"x":1}`, upstream.HeaderStatus, "201"))
	if first.status != http.StatusCreated {
		t.Fatalf("first POST: got %s, want 201", first)
	}
	wantReplayOf(t, first, s.do(t, post(w, tenant, key, `{"x":1}`, upstream.HeaderStatus, "201")))
	if n := s.up.Executions(tenant, key); n != 1 {
		t.Errorf("upstream executed %d times, want 1", n)
	}
	// Two of the tenant's 10 requests are spent: 8 more pass, then 429.
	for i := 3; i <= 10; i++ {
		if r := s.do(t, tenantGet("/things", tenant)); r.status != http.StatusOK {
			t.Fatalf("request %d: got %s, want 200", i, r)
		}
	}
	if r := s.do(t, tenantGet("/things", tenant)); r.status != http.StatusTooManyRequests {
		t.Fatalf("request 11: got %s, want 429", r)
	}
	for i := 0; i < 5; i++ {
		if r := s.do(t, tenantGet("/healthz", tenant)); r.status != http.StatusOK {
			t.Fatalf("/healthz: got %s, want 200", r)
		}
	}
}
