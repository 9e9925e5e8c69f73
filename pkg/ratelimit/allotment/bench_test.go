package allotment_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/allotment"
	"github.com/extauthz/extauthz/pkg/ratelimit/memstore"
)

// BenchmarkColdKeys decides 10,000 keys in turn over a memory store, on a
// clock that moves 10µs a decision: each key comes back every 100ms, twice
// the default horizon, so every allotment key is cold. exact passes the
// requests through the wrapper; allotment is the same limit with
// consistency allotment, which should cost no more.
func BenchmarkColdKeys(b *testing.B) {
	const keys = 10_000
	names := make([]string, keys)
	for i := range names {
		names[i] = "tenant|edge|user=" + strconv.Itoa(i)
	}
	for _, c := range []ratelimit.Consistency{ratelimit.Exact, ratelimit.Allotment} {
		b.Run(string(c), func(b *testing.B) {
			var ticks atomic.Int64
			base := time.Now()
			now := func() time.Time { return base.Add(time.Duration(ticks.Load())) }
			mem, err := memstore.New(memstore.Options{Now: now, SweepInterval: -1})
			if err != nil {
				b.Fatal(err)
			}
			s, err := allotment.New(mem, allotment.Options{Registerer: prometheus.NewRegistry(), Now: now})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			l := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Requests: 1_000_000, Period: time.Hour, Consistency: c}
			reqs := make([][]ratelimit.Request, keys)
			for i := range reqs {
				reqs[i] = []ratelimit.Request{{Key: names[i], Limits: []ratelimit.Limit{l}, Hits: 1}}
			}
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				ticks.Add(int64(10 * time.Microsecond))
				if _, err := s.AllowBatch(ctx, reqs[i%keys]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkHotKeys decides 10 keys from 64 goroutines per algorithm over a
// memory store on the real clock, as bench/peer.sh's hot-key rows do through
// gRPC and Redis: nearly every decision is local, from a slice, so this is
// the local path's cost by algorithm (and exact's, for scale).
func BenchmarkHotKeys(b *testing.B) {
	const keys = 10
	for _, alg := range []ratelimit.Algorithm{ratelimit.FixedWindow, ratelimit.GCRA} {
		for _, c := range []ratelimit.Consistency{ratelimit.Exact, ratelimit.Allotment} {
			b.Run(string(alg)+"/"+string(c), func(b *testing.B) {
				mem, err := memstore.New(memstore.Options{})
				if err != nil {
					b.Fatal(err)
				}
				s, err := allotment.New(mem, allotment.Options{Registerer: prometheus.NewRegistry()})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				l := ratelimit.Limit{Algorithm: alg, Requests: 1_000_000_000, Period: time.Second, Consistency: c}
				reqs := make([][]ratelimit.Request, keys)
				for i := range reqs {
					reqs[i] = []ratelimit.Request{{Key: "tenant|edge|user=" + strconv.Itoa(i), Limits: []ratelimit.Limit{l}, Hits: 1}}
				}
				ctx := context.Background()
				b.ReportAllocs()
				b.SetParallelism(32) // 64 goroutines on 2 cores
				var next atomic.Int64
				b.RunParallel(func(pb *testing.PB) {
					i := int(next.Add(1))
					for pb.Next() {
						if _, err := s.AllowBatch(ctx, reqs[i%keys]); err != nil {
							b.Error(err)
							return
						}
						i++
					}
				})
			})
		}
	}
}
