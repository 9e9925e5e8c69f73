package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// runBatch sends reqs as one call of the batch script at instant now, as
// the coalescer does, and returns each call with its answer.
func runBatch(t *testing.T, s *Store, reqs []ratelimit.Request, now int64) []*call {
	t.Helper()
	calls := make([]*call, len(reqs))
	for i, r := range reqs {
		calls[i] = s.newCall(context.Background(), r, now, time.Now())
		if scriptFor(calls[i].args) != decideSingle {
			t.Fatalf("request %d would not be batched: %+v", i, r)
		}
	}
	cmd := batchCall(calls).Run(context.Background(), s.client)
	answerBatch(calls, cmd)
	return calls
}

// TestBatchScriptMatchesGoAlgorithms plays random batches (1 to 8 requests
// at one instant, over three identities, so one batch often charges a key
// twice) through the batch script and through ratelimit.Decide in the same
// order, and requires identical Decisions. Half of a fixed_window limit's
// requests are charged always (-8..15 hits: refunds, and charges far past
// the limit), as envoyproxy/ratelimit's users count.
func TestBatchScriptMatchesGoAlgorithms(t *testing.T) {
	t.Parallel()
	_, c := standalone(t)
	for seed := uint64(1); seed <= 16; seed++ {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			s := newStore(t, c)
			rng := rand.New(rand.NewPCG(seed, 42))
			ref := &reference{states: map[string]ratelimit.State{}}
			var ids []string
			var limits []ratelimit.Limit
			for i := 0; i < 3; i++ {
				ids = append(ids, randomKey(t))
				alg := []ratelimit.Algorithm{ratelimit.GCRA, ratelimit.FixedWindow}[rng.IntN(2)]
				limits = append(limits, randomLimit(rng, alg))
			}
			now := t0 + rng.Int64N(int64(time.Second/time.Microsecond))
			for step := 0; step < 60; step++ {
				now += rng.Int64N(int64(2 * time.Second / time.Microsecond))
				reqs := make([]ratelimit.Request, 1+rng.IntN(8))
				for i := range reqs {
					who := rng.IntN(len(ids))
					reqs[i] = ratelimit.Request{Key: ids[who], Limits: limits[who : who+1], Hits: rng.Int64N(4)}
					if limits[who].Algorithm == ratelimit.FixedWindow && rng.IntN(2) == 0 {
						reqs[i].Hits, reqs[i].Charge = rng.Int64N(24)-8, ratelimit.ChargeAlways
					}
				}
				for i, got := range runBatch(t, s, reqs, now) {
					want := ref.decide(t, reqs[i], now)
					if got.err != nil {
						t.Fatalf("step %d request %d: %v", step, i, got.err)
					}
					if !equalDecision(got.dec[0], want) {
						t.Fatalf("step %d request %d (hits %d, %+v):\n redis %+v\n    go %+v", step, i, reqs[i].Hits, reqs[i].Limits[0], got.dec[0], want)
					}
				}
			}
		})
	}
}

// TestBatchIsolatesAFailingDecision: a decision whose key holds a value of
// another type fails alone; the others in its batch are decided and
// charged, as separate script calls in a pipeline would be.
func TestBatchIsolatesAFailingDecision(t *testing.T) {
	t.Parallel()
	_, c := standalone(t)
	s := newStore(t, c)
	ctx := context.Background()
	for _, alg := range []ratelimit.Algorithm{ratelimit.GCRA, ratelimit.FixedWindow} {
		t.Run(string(alg), func(t *testing.T) {
			l := limitFor(alg, 1, time.Hour)
			good, bad := randomKey(t), randomKey(t)
			wrong := requestKeys(s.prefix, ratelimit.Request{Key: bad, Limits: []ratelimit.Limit{l}})[0]
			if err := c.RPush(ctx, wrong, "not a rate-limit state").Err(); err != nil {
				t.Fatal(err)
			}
			req := func(key string) ratelimit.Request {
				return ratelimit.Request{Key: key, Limits: []ratelimit.Limit{l}, Hits: 1}
			}
			calls := runBatch(t, s, []ratelimit.Request{req(good), req(bad), req(good)}, t0)
			var rerr redis.Error
			if calls[1].err == nil || !errors.As(calls[1].err, &rerr) {
				t.Errorf("the wrong-type key answered %+v, %v; want a Redis error", calls[1].dec, calls[1].err)
			}
			if calls[0].err != nil || !calls[0].dec[0].Allowed {
				t.Errorf("first request: %+v, %v; want admitted", calls[0].dec, calls[0].err)
			}
			// The limit is 1: the first request's charge stood, so the
			// third (same key, same batch) is denied.
			if calls[2].err != nil || calls[2].dec[0].Allowed {
				t.Errorf("third request: %+v, %v; want denied after the first's charge", calls[2].dec, calls[2].err)
			}
			if typ := c.Type(ctx, wrong).Val(); typ != "list" {
				t.Errorf("the wrong-type key is now a %s; the failed decision must leave it alone", typ)
			}
		})
	}
}

// TestOnlyAStandaloneServerGetsBatches: a cluster's keys span slots, so a
// cluster client never gets a batch script call.
func TestOnlyAStandaloneServerGetsBatches(t *testing.T) {
	t.Parallel()
	single := newStore(t, redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}))
	cluster := newStore(t, redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}}))
	if !single.batchScripts || cluster.batchScripts {
		t.Errorf("batchScripts: standalone %v, cluster %v; want true, false", single.batchScripts, cluster.batchScripts)
	}
}
