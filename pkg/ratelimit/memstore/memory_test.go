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
// states (at most two 100ms periods' worth: 2e4).
func TestManyKeysStayBounded(t *testing.T) {
	t.Parallel()
	n := 1_000_000
	if testing.Short() || raceEnabled {
		n = 200_000
	}
	for _, a := range ratelimit.Algorithms {
		t.Run(string(a), func(t *testing.T) {
			t.Parallel()
			s, c := newStore(t, Options{})
			// Every state lives at most 2 periods (sliding_window): 200ms.
			l := limit(a, 1, 100*time.Millisecond)
			const step = 10 * time.Microsecond
			maxLive := int(2 * l.Period / step)
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
// stay distinct through lookup, expiry and eviction.
func TestHashCollisionChain(t *testing.T) {
	t.Parallel()
	var sh shard
	sh.init(0)
	a := ident{key: "a", period: time.Second}
	b := ident{key: "b", period: time.Second}
	c := ident{key: "c", period: time.Minute, alg: 3}
	sh.insert(42, a, ratelimit.State{Expires: 10, TAT: 1}, 0)
	sh.insert(42, b, ratelimit.State{Expires: 20, TAT: 2}, 0)
	sh.insert(42, c, ratelimit.State{Expires: 30, TAT: 3}, 0)
	for _, want := range []struct {
		id  ident
		tat int64
	}{{a, 1}, {b, 2}, {c, 3}} {
		if e := sh.find(42, want.id); e == nil || e.st.TAT != want.tat {
			t.Fatalf("find(%+v) = %+v", want.id, e)
		}
	}
	if e := sh.find(42, ident{key: "d", period: time.Second}); e != nil {
		t.Fatalf("found a state never stored: %+v", e)
	}
	sh.prune(42, sh.m[42], 15) // a expires
	if sh.find(42, a) != nil || sh.find(42, b) == nil || sh.find(42, c) == nil || sh.n != 2 {
		t.Fatalf("after prune: n=%d, a=%v b=%v c=%v", sh.n, sh.find(42, a), sh.find(42, b), sh.find(42, c))
	}
	sh.unlink(42, sh.find(42, c)) // the tail
	sh.unlink(42, sh.find(42, b)) // the head, last one
	if len(sh.m) != 0 || sh.n != 0 {
		t.Fatalf("after unlinking all: %d slots, n=%d", len(sh.m), sh.n)
	}
}
