package memstore

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// benchLimit admits most hits on a hot key at benchmark speed for the
// window algorithms; GCRA settles at its rate (1 per µs), so the benchmark
// mixes admits and denials as a hot key does in production.
func benchLimit(a ratelimit.Algorithm) ratelimit.Limit {
	if a == ratelimit.SlidingLog {
		// The log holds one run per admitted instant: keep it small.
		return ratelimit.Limit{Algorithm: a, Requests: 1000, Period: time.Second}
	}
	return ratelimit.Limit{Algorithm: a, Requests: 1_000_000, Period: time.Second}
}

func benchStore(b *testing.B) *Store {
	b.Helper()
	s, err := New(Options{}) // real clock and janitor, as in production
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// BenchmarkMemstoreAllow: one goroutine, one hot key.
func BenchmarkMemstoreAllow(b *testing.B) {
	for _, a := range ratelimit.Algorithms() {
		b.Run(string(a), func(b *testing.B) {
			s, l, ctx := benchStore(b), benchLimit(a), context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Allow(ctx, "tenant|domain|user=42", l, 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMemstoreAllowFakeClock is BenchmarkMemstoreAllow/gcra with a
// clock that advances 1µs per reading without asking the system: the cost
// of the store itself, without the clock read (tens of ns on some VMs).
func BenchmarkMemstoreAllowFakeClock(b *testing.B) {
	now := time.Now()
	s, err := New(Options{Now: func() time.Time { now = now.Add(time.Microsecond); return now }, SweepInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	l, ctx := benchLimit(ratelimit.GCRA), context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Allow(ctx, "tenant|domain|user=42", l, 1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMemstoreAllowParallel: GOMAXPROCS goroutines, each on its own
// key (so shards spread the load), plus the hot-key contention case.
func BenchmarkMemstoreAllowParallel(b *testing.B) {
	for _, a := range ratelimit.Algorithms() {
		b.Run(string(a), func(b *testing.B) {
			s, l, ctx := benchStore(b), benchLimit(a), context.Background()
			var id atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				key := "tenant|domain|user=" + strconv.FormatInt(id.Add(1), 10)
				for pb.Next() {
					if _, err := s.Allow(ctx, key, l, 1); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
	b.Run("gcra_one_key", func(b *testing.B) {
		s, l, ctx := benchStore(b), benchLimit(ratelimit.GCRA), context.Background()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := s.Allow(ctx, "tenant|domain|user=42", l, 1); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkMemstoreAllowManyKeys: a fresh key per call (keys prebuilt), so
// every call inserts a state and reclaims expired ones; 1s periods keep
// about a second's worth of keys live.
func BenchmarkMemstoreAllowManyKeys(b *testing.B) {
	keys := make([]string, 1<<20)
	for i := range keys {
		keys[i] = "tenant|domain|user=" + strconv.Itoa(i)
	}
	for _, a := range ratelimit.Algorithms() {
		b.Run(string(a), func(b *testing.B) {
			s, ctx := benchStore(b), context.Background()
			l := ratelimit.Limit{Algorithm: a, Requests: 10, Period: time.Second}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := s.Allow(ctx, keys[i&(len(keys)-1)], l, 1); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkMemstoreAllowBatch: one request with two limits (20/s and
// 10000/day), the RLS shape of a descriptor with several limits.
func BenchmarkMemstoreAllowBatch(b *testing.B) {
	s, ctx := benchStore(b), context.Background()
	reqs := []ratelimit.Request{{Key: "tenant|domain|user=42", Hits: 1, Limits: []ratelimit.Limit{
		{Requests: 1_000_000, Period: time.Second},
		{Algorithm: ratelimit.FixedWindow, Requests: 1 << 40, Period: 24 * time.Hour},
	}}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.AllowBatch(ctx, reqs); err != nil {
			b.Fatal(err)
		}
	}
}
