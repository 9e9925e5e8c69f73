package rlqs

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/policy"
	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/memstore"
	"github.com/extauthz/extauthz/pkg/ratelimit/quota"
	"github.com/extauthz/extauthz/pkg/ratelimit/region"
)

// globalPolicy has one rule with a global limit (600 a minute across
// regions) and one with a regional limit as well.
const globalPolicy = `
domain: quota
descriptors:
  - key: tenant
    value: acme
    rate_limit: {unit: minute, requests_per_unit: 600, algorithm: fixed_window, scope: global}
  - key: tenant
    value: both
    rate_limits:
      - {unit: minute, requests_per_unit: 600, algorithm: fixed_window, scope: global}
      - {unit: second, requests_per_unit: 1}
`

// fakeRegional gives every global limit rate requests per second and
// records what it was asked.
type fakeRegional struct {
	mu   sync.Mutex
	rate float64
	asks []region.QuotaAsk
	keys []string
}

func (f *fakeRegional) QuotaBudget(_ context.Context, key string, l ratelimit.Limit, ask region.QuotaAsk) (float64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l.Scope != ratelimit.Global {
		panic("QuotaBudget of a regional limit")
	}
	f.asks, f.keys = append(f.asks, ask), append(f.keys, key)
	return f.rate, nil
}

func (f *fakeRegional) asked() ([]region.QuotaAsk, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]region.QuotaAsk(nil), f.asks...), append([]string(nil), f.keys...)
}

// TestGlobalRuleIsDividedFromTheRegionsShare: a bucket whose rule has a
// global limit is divided from what the region may give its Envoys
// (Regional), not from the limit's 10/s; the Envoys' demand is passed on;
// the tightest of that and the rule's regional limits wins; and reported
// usage is not charged to the global limit (its part is reserved ahead).
func TestGlobalRuleIsDividedFromTheRegionsShare(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "global.yaml")
	if err := os.WriteFile(path, []byte(globalPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	limits, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fake := &fakeRegional{rate: 2}
	h := newHarness(t, Options{Policy: func() *policy.Policy { return pol }, Limits: limits, Regional: fake}, nil)
	c := h.open(t)
	send(t, c, "quota", usage(acme, 5, 0), usage(map[string]string{"tenant": "both"}, 5, 0))
	got := recv(t, c)
	if g := tokensOf(got["acme"]); g != (tokens{120, time.Minute, 2}) {
		t.Errorf("acme: %+v, want the region's 2/s (120 a minute), not the limit's 10/s", g)
	}
	if g := tokensOf(got["both"]); g != (tokens{60, time.Minute, 1}) {
		t.Errorf("both: %+v, want its regional 1/s, tighter than the region's 2/s", g)
	}
	asks, keys := fake.asked()
	if len(asks) != 2 || !math.IsInf(asks[0].Demand, 1) || asks[0].Burst != quota.DefaultBurst || asks[0].Horizon != 3*time.Hour {
		t.Errorf("asks %+v, want two with the unmeasured demand (+Inf), a 1s burst and three ticks of horizon", asks)
	}
	if len(keys) != 2 || keys[0] == keys[1] {
		t.Errorf("asked for keys %q, want each bucket's own", keys)
	}

	h.clock.Add(quota.ReportInterval)
	send(t, c, "", usage(acme, 10, 15)) // 25 asked over 5 s: 5/s
	deadline := time.Now().Add(5 * time.Second)
	for asks, _ = fake.asked(); len(asks) < 3; asks, _ = fake.asked() {
		if time.Now().After(deadline) {
			t.Fatal("no budget asked after the second report")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if d := asks[2].Demand; d != 5 {
		t.Errorf("demand passed on: %v, want the Envoy's 5/s", d)
	}
	charges := value(t, h.srv.metrics.charges.WithLabelValues(chargeCharged)) +
		value(t, h.srv.metrics.charges.WithLabelValues(chargeSaturated))
	if charges != 1 {
		t.Errorf("%v charges, want 1 (both's regional limit; acme's global limit is reserved ahead, not charged)", charges)
	}
}
