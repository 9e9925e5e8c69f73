package redisstore

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// benchLimits are generous so that most calls admit and write (the costlier
// path); the log is capped at 100 entries per key.
var benchLimits = []ratelimit.Limit{
	limitFor(ratelimit.GCRA, 1_000_000, time.Second),
	limitFor(ratelimit.SlidingLog, 100, time.Second),
	limitFor(ratelimit.SlidingWindow, 1_000_000, time.Second),
	limitFor(ratelimit.FixedWindow, 1_000_000, time.Second),
}

// BenchmarkRedisStoreAllow is one Allow (one round trip, one script) per
// operation against a local redis-server, over 10,000 keys.
func BenchmarkRedisStoreAllow(b *testing.B) {
	_, c := standalone(b)
	s := newStore(b, c)
	ctx := context.Background()
	keys := benchKeys(10_000)
	for _, l := range benchLimits {
		b.Run(string(l.Algorithm), func(b *testing.B) {
			i := 0
			for b.Loop() {
				if _, err := s.Allow(ctx, keys[i%len(keys)], l, 1); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkRedisStoreAllowParallel runs Allow from GOMAXPROCS*4 goroutines,
// the shape of a busy service, on one hot key and on 10,000 keys.
func BenchmarkRedisStoreAllowParallel(b *testing.B) {
	_, c := standalone(b)
	s := newStore(b, c)
	ctx := context.Background()
	for _, spread := range []int{1, 10_000} {
		keys := benchKeys(spread)
		for _, l := range benchLimits {
			b.Run(string(l.Algorithm)+"/keys="+strconv.Itoa(spread), func(b *testing.B) {
				var n atomic.Int64
				b.SetParallelism(4)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						k := keys[int(n.Add(1))%len(keys)]
						if _, err := s.Allow(ctx, k, l, 1); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

// BenchmarkRedisStoreAllowBatch16 decides 16 requests per pipeline; ns/op is
// per batch.
func BenchmarkRedisStoreAllowBatch16(b *testing.B) {
	_, c := standalone(b)
	s := newStore(b, c)
	ctx := context.Background()
	keys := benchKeys(10_000)
	reqs := make([]ratelimit.Request, 16)
	i := 0
	for b.Loop() {
		for j := range reqs {
			reqs[j] = ratelimit.Request{Key: keys[i%len(keys)], Limits: benchLimits[:1], Hits: 1}
			i++
		}
		if _, err := s.AllowBatch(ctx, reqs); err != nil {
			b.Fatal(err)
		}
	}
}

func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = ratelimit.Key("tenant", "bench", []ratelimit.Entry{{Key: "user", Value: strconv.Itoa(i)}})
	}
	return keys
}
