package memstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// TestManyKeysStayBounded drives 1e6 distinct keys (2e5 with -short or
// -race), one hit each, 10µs apart on the fake clock, with no janitor and no
// MaxKeys: reclaiming on insertion alone must keep the map near the live
// states (one or two 100ms periods' worth: 1e4 or 2e4).
func TestManyKeysStayBounded(t *testing.T) {
	t.Parallel()
	n := 1_000_000
	if testing.Short() || raceEnabled {
		n = 200_000
	}
	for _, a := range ratelimit.Algorithms() {
		t.Run(string(a), func(t *testing.T) {
			t.Parallel()
			s, c := newStore(t, Options{})
			// A state lives one period after its hit (two for sliding_window).
			l := limit(a, 1, 100*time.Millisecond)
			const step = 10 * time.Microsecond
			maxLive := int(l.Period / step)
			if a == ratelimit.SlidingWindow {
				maxLive *= 2
			}
			ctx := context.Background()
			key := make([]byte, 0, 16)
			peak := 0
			for i := range n {
				c.advance(step)
				key = strconv.AppendInt(key[:0], int64(i), 36)
				if _, err := s.Allow(ctx, string(key), l, 1); err != nil {
					t.Fatal(err)
				}
				if i%10_000 == 0 {
					peak = max(peak, s.Stats().States)
				}
			}
			// Analysis bound: 8/7 of the live states; allow 1.5x for sampling.
			if limit := maxLive * 3 / 2; peak > limit {
				t.Fatalf("%d keys: peak %d states, want <= %d (live <= %d)", n, peak, limit, maxLive)
			}
			t.Logf("%d keys: peak %d states (live <= %d)", n, peak, maxLive)
		})
	}
}

// TestMaxKeysIsAHardBound: with no time passing nothing expires, so only
// eviction keeps the store within MaxKeys.
func TestMaxKeysIsAHardBound(t *testing.T) {
	t.Parallel()
	const maxKeys = 1000
	s, _ := newStore(t, Options{MaxKeys: maxKeys})
	l := limit(ratelimit.FixedWindow, 10, time.Hour)
	ctx := context.Background()
	for i := range 50_000 {
		// Two limits per request: eviction must cope with own states too.
		req := ratelimit.Request{Key: strconv.Itoa(i), Hits: 1,
			Limits: []ratelimit.Limit{l, limit(ratelimit.GCRA, 10, time.Hour)}}
		if _, err := s.AllowBatch(ctx, []ratelimit.Request{req}); err != nil {
			t.Fatal(err)
		}
		if i%1000 == 0 {
			if st := s.Stats(); st.States > maxKeys {
				t.Fatalf("after %d keys: %d states > MaxKeys %d", i, st.States, maxKeys)
			}
		}
	}
	st := s.Stats()
	if st.States > maxKeys || st.Evictions == 0 {
		t.Fatalf("stats %+v: want <= %d states and some evictions", st, maxKeys)
	}
	// The most recent key keeps its state.
	if res := mustAllow(t, s, "49999", l, 0); res.Remaining != 9 {
		t.Fatalf("newest key evicted: %+v", res)
	}
}

// TestEvictionPrefersSoonestExpiry: in a one-shard store full of long-lived
// states, a short-lived one is the first evicted.
func TestEvictionPrefersSoonestExpiry(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t, Options{Shards: 1, MaxKeys: 4})
	long := limit(ratelimit.FixedWindow, 10, time.Hour)
	short := limit(ratelimit.FixedWindow, 10, time.Second)
	mustAllow(t, s, "short", short, 1)
	for _, k := range []string{"a", "b", "c"} {
		mustAllow(t, s, k, long, 1)
	}
	mustAllow(t, s, "d", long, 1) // full: one of the 4 sampled goes
	if res := mustAllow(t, s, "short", short, 0); res.Remaining != 10 {
		t.Fatalf("short-lived state survived: %+v", res)
	}
	for _, k := range []string{"a", "b", "c", "d"} {
		if res := mustAllow(t, s, k, long, 0); res.Remaining != 9 {
			t.Fatalf("%s evicted instead: %+v", k, res)
		}
	}
}

func TestSweepRemovesExpiredAndShrinks(t *testing.T) {
	t.Parallel()
	s, c := newStore(t, Options{Shards: 1})
	ctx := context.Background()
	l := limit(ratelimit.GCRA, 1, time.Second)
	for i := range 4 * shrinkMin {
		if _, err := s.Allow(ctx, strconv.Itoa(i), l, 1); err != nil {
			t.Fatal(err)
		}
	}
	keep := limit(ratelimit.GCRA, 1, time.Hour)
	mustAllow(t, s, "keep", keep, 1)
	c.advance(2 * time.Second)
	s.sweep()
	if st := s.Stats(); st.States != 1 {
		t.Fatalf("after sweep: %d states, want 1", st.States)
	}
	if s.shards[0].peak != 1 {
		t.Errorf("map not rebuilt: peak %d", s.shards[0].peak)
	}
	if res := mustAllow(t, s, "keep", keep, 1); res.Allowed {
		t.Fatalf("live state lost in sweep: %+v", res)
	}
}

// TestHashCollisionChain: states whose hashes collide share a chain and
// stay distinct through lookup and removal.
func TestHashCollisionChain(t *testing.T) {
	t.Parallel()
	var sh shard
	sh.init(0)
	ids := []ident{
		{key: "a", period: time.Second},
		{key: "b", period: time.Second},
		{key: "c", period: time.Minute, alg: 3},
	}
	for i, id := range ids {
		sh.insert(42, id, ratelimit.State{Expires: 100, TAT: int64(i)}, 0)
	}
	check := func(present ...bool) {
		t.Helper()
		n := 0
		for i, id := range ids {
			e := sh.find(42, id)
			if (e != nil) != present[i] || (e != nil && e.st.TAT != int64(i)) {
				t.Fatalf("find(%+v) = %+v, want present=%v", id, e, present[i])
			}
			if e != nil {
				n++
				if sh.ring[e.pos].e != e {
					t.Fatalf("ring position of %+v is stale", id)
				}
			}
		}
		if len(sh.ring) != n {
			t.Fatalf("ring holds %d, want %d", len(sh.ring), n)
		}
	}
	check(true, true, true)
	if e := sh.find(42, ident{key: "d", period: time.Second}); e != nil {
		t.Fatalf("found a state never stored: %+v", e)
	}
	sh.remove(sh.find(42, ids[1])) // mid-chain
	check(true, false, true)
	sh.remove(sh.find(42, ids[2])) // the head (inserted last)
	check(true, false, false)
	sh.remove(sh.find(42, ids[0]))
	check(false, false, false)
	if len(sh.m) != 0 {
		t.Fatalf("map keeps %d slots", len(sh.m))
	}
}
