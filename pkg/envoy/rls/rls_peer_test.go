package rls

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// hitsDesc is a descriptor key=value carrying its own hits_addend, a
// refund when negative (is_negative_hits).
func hitsDesc(key, value string, hits int64) *commonrlv3.RateLimitDescriptor {
	d := envoytest.Desc(key, value)
	if hits < 0 {
		d.IsNegativeHits, hits = true, -hits
	}
	d.HitsAddend = wrapperspb.UInt64(uint64(hits))
	return d
}

// codes lists a response's overall code and statuses, for messages.
func respCodes(resp *rlsv3.RateLimitResponse) string {
	s := resp.GetOverallCode().String()
	for _, st := range resp.GetStatuses() {
		s += fmt.Sprintf(" [%v %d]", st.GetCode(), st.GetLimitRemaining())
	}
	return s
}

// TestRLSChargeAlwaysAIGatewaySequence: AI Gateway's token budget as the
// peer decides it (EXTAUTHZ_RLS_CHARGE=always, the default for its users):
// a limit of 10 per hour, the request-time check (hits_addend 0), a reply
// of 10,000 tokens charged at stream done, the next request's check. The
// charge past the limit lands, so the budget trips: OK OVER_LIMIT
// OVER_LIMIT. No charge_over_limit is written: the peer's users cannot.
func TestRLSChargeAlwaysAIGatewaySequence(t *testing.T) {
	t.Parallel()
	e := startRLS(t, `
domain: ai
descriptors:
  - key: model
    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: fixed_window}
`, WithCharging(ChargeAlways))
	want := []struct {
		hits int64
		code rlsv3.RateLimitResponse_Code
	}{{0, codeOK}, {10_000, codeOver}, {0, codeOver}}
	for i, w := range want {
		resp := e.call(t, envoytest.Request("ai", hitsDesc("model", "gpt", w.hits)))
		if resp.GetOverallCode() != w.code {
			t.Fatalf("step %d (hits %d): %s, want %v", i, w.hits, respCodes(resp), w.code)
		}
		if st := resp.GetStatuses()[0]; st.GetCode() == codeOver && st.GetDurationUntilReset().AsDuration() <= 0 {
			t.Errorf("step %d: OVER_LIMIT without duration_until_reset (Envoy's Retry-After)", i)
		}
	}
}

// TestRLSChargeAlwaysCountsAsThePeer: every descriptor is charged, over
// its limit too; OVER_LIMIT when the count after the charge is above the
// limit, so a check (hits_addend 0) at exactly the limit admits, as the
// peer's INCRBY 0 does; a descriptor within its limit is charged even when
// another of the same call is over.
func TestRLSChargeAlwaysCountsAsThePeer(t *testing.T) {
	t.Parallel()
	e := startRLS(t, `
domain: api
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: fixed_window}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: fixed_window}
`, WithCharging(ChargeAlways))
	steps := []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{"10 of 10", envoytest.Request("api", hitsDesc("a", "x", 10)), "OK [OK 0]"},
		{"a check at the limit admits", envoytest.Request("api", hitsDesc("a", "x", 0)), "OK [OK 0]"},
		{"one more is charged and refused", envoytest.Request("api", hitsDesc("a", "x", 1)), "OVER_LIMIT [OVER_LIMIT 0]"},
		{"a neighbour within its limit is charged", envoytest.Request("api", hitsDesc("a", "x", 1), hitsDesc("b", "x", 5)),
			"OVER_LIMIT [OVER_LIMIT 0] [OK 95]"},
		{"b kept the 5", envoytest.Request("api", hitsDesc("b", "x", 0)), "OK [OK 95]"},
	}
	for _, s := range steps {
		if got := respCodes(e.call(t, s.req)); got != s.want {
			t.Fatalf("%s: %s, want %s", s.name, got, s.want)
		}
	}
	for i, c := range e.store.Calls() {
		for _, r := range c {
			if r.Charge != ratelimit.ChargeAlways {
				t.Errorf("call %d: store charge %v, want always", i, r.Charge)
			}
		}
	}
}

// TestRLSStopWhenOverLimit: the peer's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT
// =true. When a descriptor of the call would go over its limit, the
// descriptors that fit are not charged (the request is denied); the one
// over is, as the peer's INCRBY still runs for it. A call that fits is
// charged everywhere.
func TestRLSStopWhenOverLimit(t *testing.T) {
	t.Parallel()
	e := startRLS(t, `
domain: api
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: fixed_window}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: fixed_window}
`, WithCharging(ChargeStopWhenOverLimit))
	steps := []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{"both fit: both charged", envoytest.Request("api", hitsDesc("a", "x", 10), hitsDesc("b", "x", 5)), "OK [OK 0] [OK 95]"},
		{"a over: b not charged", envoytest.Request("api", hitsDesc("a", "x", 2), hitsDesc("b", "x", 5)), "OVER_LIMIT [OVER_LIMIT 0] [OK 95]"},
		{"b kept 95", envoytest.Request("api", hitsDesc("b", "x", 0)), "OK [OK 95]"},
		{"a was charged: 2 refunded leaves 10", envoytest.Request("api", hitsDesc("a", "x", -2)), "OK [OK 0]"},
		{"a is full", envoytest.Request("api", hitsDesc("a", "x", 1)), "OVER_LIMIT [OVER_LIMIT 0]"},
	}
	for _, s := range steps {
		if got := respCodes(e.call(t, s.req)); got != s.want {
			t.Fatalf("%s: %s, want %s", s.name, got, s.want)
		}
	}
}

// TestRLSRefunds: a descriptor with is_negative_hits gives its hits back,
// in every charging mode and algorithm: charge 8, refund 5, charge 6 fits
// a limit of 10. A refund is answered OK, even while the count stays over,
// and never takes a count below empty.
func TestRLSRefunds(t *testing.T) {
	t.Parallel()
	for _, mode := range []Charging{ChargeIfAdmitted, ChargeAlways, ChargeStopWhenOverLimit} {
		for _, alg := range ratelimit.Algorithms() {
			t.Run(fmt.Sprintf("%v/%s", mode, alg), func(t *testing.T) {
				t.Parallel()
				e := startRLS(t, fmt.Sprintf(`
domain: api
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: %s}
`, alg), WithCharging(mode))
				call := func(hits int64) *rlsv3.RateLimitResponse {
					return e.call(t, envoytest.Request("api", hitsDesc("k", "v", hits)))
				}
				for i, s := range []struct {
					hits int64
					code rlsv3.RateLimitResponse_Code
				}{{8, codeOK}, {-5, codeOK}, {6, codeOK}, {2, codeOver}, {-100, codeOK}, {10, codeOK}, {1, codeOver}} {
					if resp := call(s.hits); resp.GetOverallCode() != s.code || resp.GetStatuses()[0].GetCode() != s.code {
						t.Fatalf("step %d (hits %d): %s, want %v", i, s.hits, respCodes(resp), s.code)
					}
				}
				if got := e.metricValue(t, "over_limit"); got != 2 {
					t.Errorf("over_limit decisions %v, want 2", got)
				}
				if got := e.metricValue(t, OutcomeRefunded); got != 2 {
					t.Errorf("refunded decisions %v, want 2", got)
				}
			})
		}
	}
}

// TestRLSRefundWhileOverIsAnsweredOK: a refund that leaves the count over
// its limit is still answered OK (Envoy ignores the answer of a stream-done
// call; a refund never denies anything).
func TestRLSRefundWhileOverIsAnsweredOK(t *testing.T) {
	t.Parallel()
	e := startRLS(t, `
domain: api
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: fixed_window}
`, WithCharging(ChargeAlways))
	e.call(t, envoytest.Request("api", hitsDesc("k", "v", 50)))
	if got := respCodes(e.call(t, envoytest.Request("api", hitsDesc("k", "v", -5)))); got != "OK [OK 0]" {
		t.Errorf("refund of 5 of 50 charged: %s, want OK [OK 0]", got)
	}
	if got := respCodes(e.call(t, envoytest.Request("api", hitsDesc("k", "v", 0)))); got != "OVER_LIMIT [OVER_LIMIT 0]" {
		t.Errorf("check at 45 of 10: %s, want OVER_LIMIT", got)
	}
}

// TestRLSRefundOfAnOverride: a refund carrying a limit override gives back
// to the override's own counter.
func TestRLSRefundOfAnOverride(t *testing.T) {
	t.Parallel()
	e := startRLS(t, `
domain: api
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 1000}
`, WithCharging(ChargeAlways), WithDefaultAlgorithm(ratelimit.FixedWindow))
	over := func(hits int64) *rlsv3.RateLimitRequest {
		d := hitsDesc("k", "v", hits)
		d.Limit = &commonrlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 10, Unit: typev3.RateLimitUnit_HOUR}
		return envoytest.Request("api", d)
	}
	for i, s := range []struct {
		hits int64
		want string
	}{{8, "OK [OK 2]"}, {-5, "OK [OK 7]"}, {6, "OK [OK 1]"}} {
		if got := respCodes(e.call(t, over(s.hits))); got != s.want {
			t.Fatalf("step %d (hits %d): %s, want %s", i, s.hits, got, s.want)
		}
	}
}

// TestRLSDefaultAlgorithmOfOverrides: an override whose descriptor matched
// no rule is counted with the default algorithm (fixed_window where the
// peer's users configure us).
func TestRLSDefaultAlgorithmOfOverrides(t *testing.T) {
	t.Parallel()
	e := startRLS(t, "domain: api\n", WithDefaultAlgorithm(ratelimit.FixedWindow))
	d := envoytest.Desc("unknown", "v")
	d.Limit = &commonrlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 10, Unit: typev3.RateLimitUnit_MINUTE}
	e.call(t, envoytest.Request("api", d))
	if alg := e.store.Calls()[0][0].Limits[0].Algorithm; alg != ratelimit.FixedWindow {
		t.Errorf("override counted with %q, want fixed_window", alg)
	}
}

// metricValue is extauthz_decisions_total{api="ratelimit",outcome} summed
// over domains.
func (e *env) metricValue(t *testing.T, outcome string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != "extauthz_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["api"] == envoy.APIRateLimit && labels["outcome"] == outcome {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestRLSOverLimitDurationIsTheRetry: every OVER_LIMIT status carries
// duration_until_reset, the wait until its descriptor admits again: Envoy's
// enable_retry_after_header makes Retry-After of it, and our own
// Retry-After header says the same (two values would contradict each
// other). For a fixed window that is the window's end, as the peer's.
func TestRLSOverLimitDurationIsTheRetry(t *testing.T) {
	t.Parallel()
	for _, alg := range ratelimit.Algorithms() {
		for _, mode := range []Charging{ChargeIfAdmitted, ChargeAlways} {
			t.Run(fmt.Sprintf("%s/%v", alg, mode), func(t *testing.T) {
				t.Parallel()
				e := startRLS(t, fmt.Sprintf(`
domain: api
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: %s}
  - key: blocked
    rate_limit: {unit: hour, requests_per_unit: 0}
`, alg), WithCharging(mode))
				e.call(t, envoytest.Request("api", hitsDesc("k", "v", 10)))
				e.clock.Advance(3 * time.Second)
				resp := e.call(t, envoytest.Request("api", hitsDesc("k", "v", 1)))
				st := resp.GetStatuses()[0]
				retry, _ := header(resp, "Retry-After")
				got := st.GetDurationUntilReset().AsDuration()
				if st.GetCode() != codeOver || got <= 0 || strconv.Itoa(int(envoy.CeilSeconds(got))) != retry {
					t.Errorf("OVER_LIMIT status %v with duration_until_reset %s; Retry-After %q: want them equal", st.GetCode(), got, retry)
				}
				if alg == ratelimit.FixedWindow && got != 42*time.Second {
					t.Errorf("fixed window: duration_until_reset %s, want 42s (the minute's end)", got)
				}
				b := e.call(t, envoytest.Request("api", envoytest.Desc("blocked", "v"))).GetStatuses()[0]
				if b.GetCode() != codeOver || b.GetDurationUntilReset().AsDuration() != time.Hour {
					t.Errorf("blocked rule: %v with duration_until_reset %s, want OVER_LIMIT with 1h", b.GetCode(), b.GetDurationUntilReset().AsDuration())
				}
			})
		}
	}
}

// TestRLSOverrideInBothPhasesOfAStream: Envoy Gateway sends a descriptor's
// limit (from metadata) with the request and again with the stream-done
// charge; both reach one counter (the override is part of its key), so the
// cost charged at the end trips the budget the next check reads.
func TestRLSOverrideInBothPhasesOfAStream(t *testing.T) {
	t.Parallel()
	e := startRLS(t, "domain: api\n", WithCharging(ChargeAlways), WithDefaultAlgorithm(ratelimit.FixedWindow))
	call := func(hits int64) string {
		d := hitsDesc("tenant_rate_limit", "t1", hits)
		d.Limit = &commonrlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 10, Unit: typev3.RateLimitUnit_HOUR}
		return respCodes(e.call(t, envoytest.Request("api", d)))
	}
	for i, s := range []struct {
		hits int64
		want string
	}{{0, "OK [OK 10]"}, {10_000, "OVER_LIMIT [OVER_LIMIT 0]"}, {0, "OVER_LIMIT [OVER_LIMIT 0]"}} {
		if got := call(s.hits); got != s.want {
			t.Fatalf("step %d (hits %d): %s, want %s", i, s.hits, got, s.want)
		}
	}
}

// TestRLSStopWhenOverLimitStoreFailures: both of the mode's store calls
// fail as any call does: a store error is Unavailable, and a reply with the
// wrong number of decisions to the first (the check) is too, not a panic.
func TestRLSStopWhenOverLimitStoreFailures(t *testing.T) {
	t.Parallel()
	e := startRLS(t, ordersPolicy, WithCharging(ChargeStopWhenOverLimit))
	req := envoytest.Request("api", envoytest.Desc("route", "/orders"), envoytest.Desc("route", "/gcra"))
	e.store.SetErr(errors.New("connection refused"))
	if _, err := e.client.ShouldRateLimit(context.Background(), req); status.Code(err) != codes.Unavailable {
		t.Errorf("store error: %v, want Unavailable", err)
	}
	e.store.SetErr(nil)
	e.store.SetReply(func([]ratelimit.Request) []ratelimit.Decision { return []ratelimit.Decision{{Allowed: true}} })
	if _, err := e.client.ShouldRateLimit(context.Background(), req); status.Code(err) != codes.Unavailable {
		t.Errorf("malformed store reply: %v, want Unavailable", err)
	}
}
