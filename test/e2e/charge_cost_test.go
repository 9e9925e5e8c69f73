package e2e

import (
	"bufio"
	"context"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/test/e2e/upstream"
)

// TestChargeCostShippedExample: the shipped example's token budgets charge
// every reply, through a real Envoy (envoy/front-proxy.yaml's /llm route,
// examples/policy): a 2 MiB JSON reply and a 100 KiB final event still
// yield their usage (the free plan's 1000 a minute admits four replies of
// 300), and a client that leaves a stream before its usage event pays the
// plan's default (1000 on free, 4000 on pro) or its x-max-tokens
// reservation when that is larger (issue 36, finding 4: each was charged
// nothing).
func TestChargeCostShippedExample(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOpts{replicas: 1, policy: filepath.Join(deps.root, "examples", "policy")})
	llm := func(sub, plan, in string, kv ...string) req {
		r := llmGet("/llm/chat", sub, 300, in)
		var extra map[string]any
		if plan != "" {
			extra = map[string]any{"plan": plan}
		}
		r.header["authorization"] = bearer(sub, extra)
		for i := 0; i+1 < len(kv); i += 2 {
			r.header[kv[i]] = kv[i+1]
		}
		return r
	}
	t.Run("large_json_reply", func(t *testing.T) {
		t.Parallel()
		r := llm(uniq("bigjson"), "", "json", upstream.HeaderUsagePad, strconv.Itoa(2<<20))
		rep := s.do(t, r)
		if rep.status != http.StatusOK || len(rep.body) < 2<<20 || !strings.Contains(string(rep.body[len(rep.body)-200:]), `"total_tokens":300`) {
			t.Fatalf("got %d with %d bytes, want 200 with 2 MiB and the usage last", rep.status, len(rep.body))
		}
		if n := 1 + spendTokens(t, s, r); n != 4 {
			t.Errorf("admitted %d replies of 2 MiB costing 300 on a budget of 1000, want 4", n)
		}
	})
	t.Run("large_final_event", func(t *testing.T) {
		t.Parallel()
		if n := spendTokens(t, s, llm(uniq("bigevent"), "", "sse", upstream.HeaderUsagePad, strconv.Itoa(100<<10))); n != 4 {
			t.Errorf("admitted %d streams whose 100 KiB last event costs 300 on a budget of 1000, want 4", n)
		}
	})
	t.Run("client_leaves_mid_stream", func(t *testing.T) {
		t.Parallel()
		// Free: the default is the minute's budget. Once gcra has freed a
		// little of it, one reply of 300 is admitted and the next refused;
		// were the stream left free, the next would be admitted too.
		sub := uniq("leaves")
		leaveMidStream(t, s, llm(sub, "", "sse", upstream.HeaderUsageStall, "1"), 1)
		deadline := time.Now().Add(5 * time.Second)
		for rep := s.do(t, llm(sub, "", "json")); rep.status != http.StatusOK; rep = s.do(t, llm(sub, "", "json")) {
			if rep.status != http.StatusTooManyRequests || time.Now().After(deadline) {
				t.Fatalf("after a stream left: got %s, want 429 for a moment, then 200", rep)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if rep := s.do(t, llm(sub, "", "json")); rep.status != http.StatusTooManyRequests {
			t.Fatalf("after a stream left (1000) and a reply of 300: got %s, want 429", rep)
		}
		// Pro: a reservation above the default (9000 > 4000) is kept,
		// then the default alone (4000) for a stream left unreserved.
		// The charge lands just after the missing cost is counted.
		pro := func(want float64) float64 {
			labels := `limit="tokens-pro"`
			deadline := time.Now().Add(5 * time.Second)
			for {
				got := replicaMetricWith(t, s.replicas[0], "extauthz_charged_cost_total", labels) -
					replicaMetricWith(t, s.replicas[0], "extauthz_charge_refunded_total", labels)
				if got == want || time.Now().After(deadline) {
					return got
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		sub = uniq("leaves-pro")
		leaveMidStream(t, s, llm(sub, "pro", "sse", upstream.HeaderUsageStall, "1", "x-max-tokens", "9000"), 2)
		if got := pro(9000); got != 9000 {
			t.Errorf("pro, a stream left with 9000 reserved: charged %v, want 9000", got)
		}
		leaveMidStream(t, s, llm(sub, "pro", "sse", upstream.HeaderUsageStall, "1"), 3)
		if got := pro(9000 + 4000); got != 9000+4000 {
			t.Errorf("pro, then a stream left unreserved: charged %v in all, want 13000", got)
		}
	})
}

// leaveMidStream starts r (a stalled stream), reads its first event and
// leaves: the connection is closed before the usage event. It returns once
// the replica counted the stream's cost as missing (the nth such charge):
// the charge lands when Envoy ends its ext_proc stream, a moment after the
// client left.
func leaveMidStream(t *testing.T, s *stack, r req, nth int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, err := s.send(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: got %d, want 200", resp.StatusCode)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first event: %q %v", line, err)
	}
	cancel() // the client leaves
	deadline := time.Now().Add(10 * time.Second)
	for replicaMetricWith(t, s.replicas[0], "extauthz_charges_total", `result="missing"`) < float64(nth) {
		if time.Now().After(deadline) {
			t.Fatalf("no missing cost counted for stream %d 10s after the client left", nth)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
