package rls

import (
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

func TestCurrentLimitUnits(t *testing.T) {
	t.Parallel()
	const (
		sec    = rlsv3.RateLimitResponse_RateLimit_SECOND
		minute = rlsv3.RateLimitResponse_RateLimit_MINUTE
		hour   = rlsv3.RateLimitResponse_RateLimit_HOUR
		day    = rlsv3.RateLimitResponse_RateLimit_DAY
		week   = rlsv3.RateLimitResponse_RateLimit_WEEK
		month  = rlsv3.RateLimitResponse_RateLimit_MONTH
		year   = rlsv3.RateLimitResponse_RateLimit_YEAR
	)
	cases := []struct {
		period time.Duration
		unit   rlsv3.RateLimitResponse_RateLimit_Unit
		mult   uint32 // 0: unset (1)
	}{
		{time.Second, sec, 0},
		{10 * time.Second, sec, 10},
		{90 * time.Second, sec, 90},
		{time.Minute, minute, 0},
		{15 * time.Minute, minute, 15},
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

// TestLongUnitsCountThePeersWindows: week, month (30 days) and year (365
// days) fixed windows start where envoyproxy/ratelimit's do, at multiples
// of the unit since the Unix epoch (its now - now % unit): the
// duration_until_reset of a first hit is the time to the next one, and the
// status names the unit.
func TestLongUnitsCountThePeersWindows(t *testing.T) {
	t.Parallel()
	e := startRLS(t, `
domain: api
descriptors:
  - {key: u, value: week, rate_limit: {unit: week, requests_per_unit: 5, algorithm: fixed_window}}
  - {key: u, value: month, rate_limit: {unit: month, requests_per_unit: 5, algorithm: fixed_window}}
  - {key: u, value: year, rate_limit: {unit: year, requests_per_unit: 5, algorithm: fixed_window}}
`)
	for _, c := range []struct {
		value string
		unit  rlsv3.RateLimitResponse_RateLimit_Unit
		secs  int64
	}{
		{"week", rlsv3.RateLimitResponse_RateLimit_WEEK, 7 * 86400},
		{"month", rlsv3.RateLimitResponse_RateLimit_MONTH, 30 * 86400},
		{"year", rlsv3.RateLimitResponse_RateLimit_YEAR, 365 * 86400},
	} {
		st := e.call(t, envoytest.Request("api", envoytest.Desc("u", c.value))).GetStatuses()[0]
		now := e.clock.Now().Unix()
		want := time.Duration(c.secs-now%c.secs) * time.Second
		if st.GetCurrentLimit().GetUnit() != c.unit || st.GetDurationUntilReset().AsDuration() != want || st.GetLimitRemaining() != 4 {
			t.Errorf("%s: %v, want unit %v, 4 remaining, reset in %s", c.value, st, c.unit, want)
		}
	}
}
