package rls

import (
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

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
