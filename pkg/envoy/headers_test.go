package envoy

import (
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

func TestCurrentLimitUnits(t *testing.T) {
	t.Parallel()
	const (
		sec   = rlsv3.RateLimitResponse_RateLimit_SECOND
		min   = rlsv3.RateLimitResponse_RateLimit_MINUTE
		hour  = rlsv3.RateLimitResponse_RateLimit_HOUR
		day   = rlsv3.RateLimitResponse_RateLimit_DAY
		week  = rlsv3.RateLimitResponse_RateLimit_WEEK
		month = rlsv3.RateLimitResponse_RateLimit_MONTH
		year  = rlsv3.RateLimitResponse_RateLimit_YEAR
	)
	cases := []struct {
		period time.Duration
		unit   rlsv3.RateLimitResponse_RateLimit_Unit
		mult   uint32 // 0: unset (1)
	}{
		{time.Second, sec, 0},
		{10 * time.Second, sec, 10},
		{90 * time.Second, sec, 90},
		{time.Minute, min, 0},
		{15 * time.Minute, min, 15},
		{2 * time.Hour, hour, 2},
		{24 * time.Hour, day, 0},
		{7 * 24 * time.Hour, week, 0},
		{14 * 24 * time.Hour, week, 2},
		{30 * 24 * time.Hour, month, 0},
		{365 * 24 * time.Hour, year, 0},
		{500 * time.Millisecond, sec, 0},  // rounded up to a second
		{1500 * time.Millisecond, sec, 2}, // rounded up to whole seconds
	}
	for _, c := range cases {
		rl := &rlsv3.RateLimitResponse_RateLimit{}
		setCurrentLimit(rl, "n", ratelimit.Limit{Requests: 7, Period: c.period})
		if rl.GetUnit() != c.unit || rl.GetUnitMultiplier().GetValue() != c.mult || rl.GetRequestsPerUnit() != 7 || rl.GetName() != "n" {
			t.Errorf("%s: got %v, want unit %v multiplier %d", c.period, rl, c.unit, c.mult)
		}
		if c.mult == 0 && rl.GetUnitMultiplier() != nil {
			t.Errorf("%s: unit_multiplier set to %d, want unset", c.period, rl.GetUnitMultiplier().GetValue())
		}
	}
}

func TestSFString(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"per-tenant":    `"per-tenant"`,
		`say "hi"`:      `"say \"hi\""`,
		`back\slash`:    `"back\\slash"`,
		"tab\there":     `"tab_here"`,
		"caf\u00e9":     `"caf__"`,
		"":              `""`,
		"api.route_/x*": `"api.route_/x*"`,
	} {
		if got := sfString(in); got != want {
			t.Errorf("sfString(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestRateLimitHeaders(t *testing.T) {
	t.Parallel()
	qs := []quota{
		{name: "a", quota: 10, window: 1500 * time.Millisecond, remaining: 3, reset: 1200 * time.Millisecond},
		{name: "a", quota: 10, window: 1500 * time.Millisecond, remaining: 3, reset: 1200 * time.Millisecond},
		{name: "b", quota: 5, window: 100 * time.Millisecond, remaining: 0, reset: 0},
	}
	hs := rateLimitHeaders(qs, true, 1001*time.Millisecond)
	want := map[string]string{
		HeaderRateLimitPolicy: `"a";q=10;w=2, "b";q=5;w=1`,
		HeaderRateLimit:       `"a";r=3;t=2, "b";r=0;t=0`,
		HeaderRetryAfter:      "2",
	}
	if len(hs) != len(want) {
		t.Fatalf("headers %v, want %v", hs, want)
	}
	for _, h := range hs {
		if want[h.GetKey()] != h.GetValue() {
			t.Errorf("%s = %q, want %q", h.GetKey(), h.GetValue(), want[h.GetKey()])
		}
	}
	if hs := rateLimitHeaders(nil, false, 0); len(hs) != 0 {
		t.Errorf("no quotas: headers %v, want none", hs)
	}
}
