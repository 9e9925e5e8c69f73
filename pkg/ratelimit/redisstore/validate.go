package redisstore

import (
	"fmt"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// maxExact bounds every microsecond quantity the script computes: Lua holds
// numbers in doubles, exact only below 2^53.
const maxExact = 1 << 52

// validateRequest rejects what the script cannot decide exactly: invalid
// limits or hits, two limits sharing a key (same algorithm and period), and
// sizes whose products leave the exact range of a double.
func validateRequest(r ratelimit.Request) error {
	if len(r.Limits) == 0 {
		return fmt.Errorf("%w: no limits", ratelimit.ErrInvalidLimit)
	}
	if err := ratelimit.CheckCharge(r.Hits, r.Charge); err != nil {
		return err
	}
	if err := validateLease(r); err != nil {
		return err
	}
	type slot struct {
		alg    ratelimit.Algorithm
		period int64
	}
	seen := make(map[slot]bool, len(r.Limits))
	for i, l := range r.Limits {
		if err := l.Validate(); err != nil {
			return fmt.Errorf("limit %d: %w", i, err)
		}
		k := slot{l.Algorithm.OrDefault(), l.Period.Milliseconds()}
		if seen[k] {
			return fmt.Errorf("%w: limit %d repeats algorithm %s and period %s", ratelimit.ErrInvalidLimit, i, k.alg, l.Period)
		}
		seen[k] = true
		if err := checkExact(l, r.Hits); err != nil {
			return fmt.Errorf("limit %d: %w", i, err)
		}
	}
	return nil
}

// checkExact rejects limits whose largest intermediate value (the GCRA
// tolerance, the hits' cost, twice the period) would not be exact in a double.
func checkExact(l ratelimit.Limit, hits int64) error {
	p := l.Period.Microseconds()
	t := max(p/l.Requests, 1)
	b := max(l.Burst, l.Requests)
	if hits < 0 { // a refund; maxExact is far from math.MinInt64
		hits = -max(hits, -maxExact)
	}
	if p > maxExact/2 || b > maxExact/t || hits > maxExact/t {
		return fmt.Errorf("%w: period %s with %d requests and burst %d exceeds the exact range", ratelimit.ErrInvalidLimit, l.Period, l.Requests, l.Burst)
	}
	return nil
}
