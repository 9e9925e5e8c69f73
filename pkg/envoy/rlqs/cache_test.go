package rlqs

import (
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit/quota"
)

// An allocation is reused for less than maxAge, for the same budget only,
// and stale entries are swept once per maxAge.
func TestAllocCache(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := newAllocCache(time.Second)
	shares := map[string]quota.Share{"a": {Rate: 1}}
	c.put("k", 10, 10, shares, t0)
	cases := []struct {
		budget float64
		at     time.Duration
		hit    bool
	}{
		{10, 0, true},
		{10, 999 * time.Millisecond, true},
		{10, time.Second, false},
		{20, 0, false},            // the rule's limit changed
		{10, -time.Second, false}, // the clock went back
	}
	for _, tc := range cases {
		if _, _, ok := c.get("k", tc.budget, t0.Add(tc.at)); ok != tc.hit {
			t.Errorf("get(budget %v, t0%+v) hit = %v, want %v", tc.budget, tc.at, ok, tc.hit)
		}
	}
	c.put("other", 10, 10, shares, t0.Add(2*time.Second))
	if n := c.len(); n != 1 {
		t.Errorf("after a put 2s later: %d entries, want the stale one swept", n)
	}
}
