package e2e

import "testing"

// scenario is one behaviour proven through the shared front-proxy stack.
type scenario struct {
	name string
	run  func(t *testing.T, s *stack)
}

// TestFrontProxy runs the scenarios that share one default stack
// (envoy/front-proxy.yaml, two extauthz replicas on one Redis) in parallel;
// each uses its own tenants and keys, so they cannot disturb each other.
// Run one with e.g. go test -run 'TestFrontProxy/ratelimit/eleventh' ./test/e2e/.
func TestFrontProxy(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOpts{})
	groups := []struct {
		name      string
		scenarios []scenario
	}{
		{"ratelimit", rateLimitScenarios},
		{"allotment", allotmentScenarios},
		{"idempotency", idempotencyScenarios},
		{"hostile", hostileScenarios},
		{"large_reply", largeReplyScenarios},
		{"jwt", jwtScenarios},
		{"charge", chargeScenarios},
		{"charge_atomic", chargeAtomicScenarios},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			for _, sc := range g.scenarios {
				t.Run(sc.name, func(t *testing.T) {
					t.Parallel()
					sc.run(t, s)
				})
			}
		})
	}
}
