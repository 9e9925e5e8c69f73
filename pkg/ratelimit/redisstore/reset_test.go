package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// TestPeekChangesNothingAndResetEmpties checks the two operations the admin
// API builds on, for every algorithm: a 0-hit request leaves every key, value
// and TTL as it was, and Reset deletes the state so that the next decision
// sees a full allowance.
func TestPeekChangesNothingAndResetEmpties(t *testing.T) {
	t.Parallel()
	_, c := standalone(t)
	ctx := context.Background()
	for _, alg := range ratelimit.Algorithms() {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			s := newStore(t, c)
			l := ratelimit.Limit{Algorithm: alg, Requests: 5, Period: time.Minute}
			l2 := ratelimit.Limit{Algorithm: alg, Requests: 50, Period: time.Hour}
			req := ratelimit.Request{Key: randomKey(t), Limits: []ratelimit.Limit{l, l2}, Hits: 2}
			if _, err := s.AllowBatch(ctx, []ratelimit.Request{req}); err != nil {
				t.Fatal(err)
			}
			keys := s.StateKeys(req)
			before, ttlBefore := dumpKeys(t, c, keys)
			peek := req
			peek.Hits = 0
			for range 3 {
				d, err := s.AllowBatch(ctx, []ratelimit.Request{peek})
				if err != nil {
					t.Fatal(err)
				}
				if got := d[0].Results[0].Remaining; got != 3 {
					t.Fatalf("peek remaining = %d, want 3", got)
				}
			}
			after, ttlAfter := dumpKeys(t, c, keys)
			if after != before {
				t.Fatalf("a 0-hit request changed the state:\nbefore %q\nafter  %q", before, after)
			}
			for i := range ttlAfter { // a TTL only runs down: never extended
				if ttlAfter[i] > ttlBefore[i] || ttlAfter[i] < ttlBefore[i]-5*time.Second {
					t.Fatalf("TTL of %s went from %v to %v", keys[i], ttlBefore[i], ttlAfter[i])
				}
			}
			if err := s.Reset(ctx, []ratelimit.Request{req}); err != nil {
				t.Fatal(err)
			}
			if n, err := c.Exists(ctx, keys...).Result(); err != nil || n != 0 {
				t.Fatalf("after Reset %d of %v exist (err %v)", n, keys, err)
			}
			d, err := s.AllowBatch(ctx, []ratelimit.Request{peek})
			if err != nil {
				t.Fatal(err)
			}
			if got := d[0].Results[0].Remaining; got != 5 {
				t.Fatalf("remaining after reset = %d, want 5", got)
			}
		})
	}
}

// dumpKeys returns the keys' serialized values, concatenated, and their TTLs.
func dumpKeys(t *testing.T, c *redis.Client, keys []string) (string, []time.Duration) {
	t.Helper()
	ctx := context.Background()
	var out string
	ttls := make([]time.Duration, len(keys))
	for i, k := range keys {
		v, err := c.Dump(ctx, k).Result()
		if err != nil {
			t.Fatalf("DUMP %s: %v", k, err)
		}
		out += k + "=" + v + ";"
		ttls[i] = c.PTTL(ctx, k).Val()
		if ttls[i] <= 0 {
			t.Fatalf("%s has no TTL", k)
		}
	}
	return out, ttls
}

// TestResetOnCluster: one Reset of requests whose keys live on different
// masters deletes them all (one DEL per request, each within one slot).
func TestResetOnCluster(t *testing.T) {
	t.Parallel()
	c := redistest.NewCluster(t).Client()
	s := newStore(t, c)
	ctx := context.Background()
	limits := []ratelimit.Limit{{Requests: 5, Period: time.Minute}, {Algorithm: ratelimit.FixedWindow, Requests: 50, Period: time.Hour}}
	var reqs []ratelimit.Request
	var keys []string
	for i := range 8 { // eight identities: several slots, almost surely several masters
		r := ratelimit.Request{Key: randomKey(t) + string(rune('a'+i)), Limits: limits, Hits: 1}
		reqs = append(reqs, r)
		keys = append(keys, s.StateKeys(r)...)
	}
	if _, err := s.AllowBatch(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if n, err := c.Exists(ctx, k).Result(); err != nil || n != 1 {
			t.Fatalf("%s before Reset: exists=%d err=%v", k, n, err)
		}
	}
	if err := s.Reset(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if n, err := c.Exists(ctx, k).Result(); err != nil || n != 0 {
			t.Fatalf("%s after Reset: exists=%d err=%v", k, n, err)
		}
	}
}
