package e2e

import (
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/extauthz/extauthz/test/e2e/upstream"
)

// chargeScenarios are the limits charged after the fact (issue 31): by
// outcome (failed logins), by cost (tokens in the reply), and Envoy's RLS
// pattern for costs known at the end of a stream.
var chargeScenarios = []scenario{
	{"rls_metered_stream_done", testMeteredRLS},
	{"login_failures_per_address", testLoginFailuresPerAddress},
	{"login_successes_never_count", testLoginSuccessesNeverCount},
	{"login_failures_per_account", testLoginFailuresPerAccount},
	{"login_account_variants", testLoginAccountVariants},
	{"login_lockout_grows", testLoginLockoutGrows},
	{"tokens_json_body", testTokensJSON},
	{"tokens_header", testTokensHeader},
	{"tokens_streamed_last_event", testTokensStreamed},
	{"tokens_concurrent_overshoot_bound", testTokensConcurrentOvershoot},
	{"tokens_replicas_share_exactly", testTokensReplicasShare},
	{"ext_proc_alone_wiring", testChargeExtProcAlone},
}

// TestChargeShippedExample runs the shipped example as docker compose runs
// it: examples/policy behind envoy/front-proxy.yaml. The login route's
// failures per address (5 a minute, fixed_window) trip the lockout of a
// minute: the 6th attempt, right password and all, is refused for that
// minute, while another address logs in. The token budgets follow the
// caller's plan: the free plan's 1000 a minute admits four replies of 300,
// the pro plan's 100,000 a fifth and more.
func TestChargeShippedExample(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOpts{replicas: 1, policy: filepath.Join(deps.root, "examples", "policy")})
	t.Run("login_lockout", func(t *testing.T) {
		t.Parallel()
		// A fixed window aligns to the minute: a run whose 5 failures
		// straddle an edge counts them in two windows and is retried on a
		// fresh address.
		for try := 1; ; try++ {
			c := s.loginFrom(t, fmt.Sprintf("127.0.7.%d", try))
			start := time.Now()
			for i := 1; i <= 5; i++ {
				c.mustLogin(t, "/login", "alice", wrongPassword, http.StatusUnauthorized)
			}
			status, ra := c.login(t, "/login", "alice", upstream.Password)
			if start.Truncate(time.Minute) != time.Now().Truncate(time.Minute) && try < 3 {
				continue
			}
			if status != http.StatusTooManyRequests || ra < 50 || ra > 60 {
				t.Fatalf("6th attempt: got %d Retry-After %d, want 429 locked out for about a minute", status, ra)
			}
			break
		}
		s.loginFrom(t, "127.0.7.100").mustLogin(t, "/login", "alice", upstream.Password, http.StatusOK)
	})
	t.Run("tokens_per_plan", func(t *testing.T) {
		t.Parallel()
		get := func(sub, plan string) req {
			r := llmGet("/llm/chat", sub, 300, "json")
			var extra map[string]any
			if plan != "" {
				extra = map[string]any{"plan": plan}
			}
			r.header["authorization"] = bearer(sub, extra)
			return r
		}
		if n := spendTokens(t, s, get(uniq("free"), "")); n != 4 {
			t.Errorf("free plan: admitted %d replies of 300, want 4", n)
		}
		if n := spendTokens(t, s, get(uniq("pro"), "pro")); n != 10 {
			t.Errorf("pro plan: admitted %d of 10 replies of 300, want all", n)
		}
	})
}
