package overlimit_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/failover"
	"github.com/extauthz/extauthz/pkg/ratelimit/overlimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/redisstore"
)

// BenchmarkExactStackRedis is one exact decision per operation through the
// service's store stack (this cache over failover over a local
// redis-server), one fixed_window limit, over 10,000 keys, from 64
// goroutines on two CPUs: the coalesced path of a busy service, in
// process. Allocations are per decision.
func BenchmarkExactStackRedis(b *testing.B) {
	srv := redistest.Standalone(b)
	rs, err := redisstore.New(srv.Client(), redisstore.Options{CallTimeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	fs, err := failover.New(rs, failover.Options{Mode: failover.Closed, Registerer: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	s, err := overlimit.New(fs, overlimit.Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	limits := []ratelimit.Limit{{Algorithm: ratelimit.FixedWindow, Requests: 1_000_000_000, Period: time.Second}}
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = ratelimit.Key("tenant", "bench", []ratelimit.Entry{{Key: "user", Value: strconv.Itoa(i)}})
	}
	ctx := context.Background()
	var n atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		reqs := make([]ratelimit.Request, 1)
		for pb.Next() {
			reqs[0] = ratelimit.Request{Key: keys[int(n.Add(1))%len(keys)], Limits: limits, Hits: 1}
			if _, err := s.AllowBatch(ctx, reqs); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
