package region

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/redisscript"
	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/internal/testclock"
)

// The batch script decides as the single script does: random batches of
// decisions (1 to 8 at one instant, over three keys, so one batch often
// decides a key twice; every charge mode; caps from a written grant or
// the floor) through the batch script on one prefix and one by one through
// the single script on another, with identical replies.
func TestBatchScriptMatchesSingleScript(t *testing.T) {
	ctx := context.Background()
	c := redistest.Standalone(t).Client()
	for seed := uint64(1); seed <= 12; seed++ {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 5))
			clock := testclock.New(time.UnixMilli(1_800_000_000_000))
			batched, _ := newTestPair(t, c, clock, fmt.Sprintf("b%d", seed))
			single, _ := newTestPair(t, c, clock, fmt.Sprintf("s%d", seed))
			r := Rule{Limit: 20, Period: time.Second, Floor: 0.25} // cap 5 without a grant
			keys := []string{"k0", "k1", "k2"}
			modes := []string{"i", "n", "a", "r"}
			for step := range 40 {
				clock.Advance(time.Duration(rng.IntN(400)) * time.Millisecond)
				if rng.IntN(4) == 0 { // a grant for this window and the next
					w := r.Window(clock.Now())
					k := keys[rng.IntN(len(keys))]
					caps := fmt.Sprintf("%d %d %d", w, 5+rng.IntN(10), 5+rng.IntN(10))
					for _, l := range []*Local{batched, single} {
						if err := c.HSet(ctx, l.Key(k), "c", caps).Err(); err != nil {
							t.Fatal(err)
						}
					}
				}
				calls := make([]redisscript.Call, 1+rng.IntN(8))
				var want []any
				for i := range calls {
					k, mode := keys[rng.IntN(len(keys))], modes[rng.IntN(len(modes))]
					hits := int64(rng.IntN(6))
					if mode == "a" {
						hits -= 2
					}
					args := []any{i64(hits), i64(r.PeriodMS()), i64(r.FloorHits()), ms(keyTTL(r, testTopo)), batched.now.arg(), mode}
					calls[i] = redisscript.Call{Script: localDecideScript, Keys: []string{batched.Key(k)}, Args: args}
					v, err := localDecideScript.Run(ctx, c, []string{single.Key(k)}, args).Result()
					if err != nil {
						t.Fatal(err)
					}
					want = append(want, v)
				}
				got, err := batchDecisions(calls).Run(ctx, c).Result()
				if err != nil {
					t.Fatal(err)
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("step %d, %d decisions:\n batch  %v\n single %v", step, len(calls), got, want)
				}
			}
		})
	}
}

// Concurrent decisions leave together: 200 goroutines deciding one key
// with a floor cap of 50 admit exactly 50, in fewer round trips than
// decisions: on a standalone server as batch script calls, on a cluster
// as pipelines of single calls (counted by a hook on the client).
func TestConcurrentDecisionsAreCoalesced(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		c := redistest.Standalone(t).Client()
		trips := &roundTrips{}
		c.AddHook(trips)
		l, _ := newTestPair(t, c, testclock.New(time.UnixMilli(1_800_000_000_000)), "eu")
		if l.decisions == nil || l.decisions.batch == nil {
			t.Fatal("a standalone client's decisions are not coalesced into batches")
		}
		checkCoalesced(t, l, trips)
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.NewCluster(t).Client()
		trips := &roundTrips{}
		c.AddHook(trips)
		l, _ := newTestPair(t, c, testclock.New(time.UnixMilli(1_800_000_000_000)), "eu")
		if l.decisions == nil || l.decisions.batch != nil {
			t.Fatal("a cluster client's decisions are not coalesced into pipelines of single calls")
		}
		checkCoalesced(t, l, trips)
	})
}

func checkCoalesced(t *testing.T, l *Local, trips *roundTrips) {
	ctx := context.Background()
	r := Rule{Limit: 100, Period: time.Minute, Floor: 0.5}
	const n = 200
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for range n {
		wg.Go(func() {
			res, err := l.Decide(ctx, "k", r, testTopo, 1, "i")
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if res.Allowed {
				admitted++
			}
		})
	}
	wg.Wait()
	if admitted != 50 {
		t.Errorf("%d of %d admitted, want exactly the cap, 50", admitted, n)
	}
	singles, pipelines := trips.counts()
	t.Logf("%d decisions in %d single commands and %d pipelines", n, singles, pipelines)
	if singles+pipelines >= n {
		t.Errorf("%d round trips for %d concurrent decisions: not coalesced", singles+pipelines, n)
	}
}

// roundTrips counts the commands a client sends alone and the pipelines it
// sends (go-redis hooks).
type roundTrips struct {
	mu                 sync.Mutex
	singles, pipelines int
}

func (h *roundTrips) counts() (int, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.singles, h.pipelines
}

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			h.mu.Lock()
			h.singles++
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		h.pipelines++
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

// A key of the wrong type fails its own decision only; the others in its
// batch are decided.
func TestBatchDecisionErrorFailsAlone(t *testing.T) {
	ctx := context.Background()
	c := redistest.Standalone(t).Client()
	clock := testclock.New(time.UnixMilli(1_800_000_000_000))
	l, _ := newTestPair(t, c, clock, "eu")
	if err := c.Set(ctx, l.Key("bad"), "a string", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r := Rule{Limit: 100, Period: time.Minute, Floor: 0.5}
	pend := make([]*pending, 3)
	for i, k := range []string{"good", "bad", "good"} {
		args := []any{"1", i64(r.PeriodMS()), i64(r.FloorHits()), ms(keyTTL(r, testTopo)), l.now.arg(), "i"}
		pend[i] = &pending{ctx: ctx, call: redisscript.Call{Script: localDecideScript, Keys: []string{l.Key(k)}, Args: args}, done: make(chan struct{})}
	}
	l.decisions.send(pend)
	for i, p := range pend {
		<-p.done
		if (p.err != nil) != (i == 1) {
			t.Errorf("decision %d: reply %v, error %v; want an error only for the key of the wrong type", i, p.reply, p.err)
		}
	}
	if a, _ := pend[2].reply.([]any); len(a) != 4 || a[2] != int64(48) {
		t.Errorf("the second decision of key good: %v, want 48 left of 50 (both charged)", pend[2].reply)
	}
}

// A decision whose context ends while it waits behind a round trip is not
// sent: the caller gets its context's error, and nothing is charged; the
// decision queued beside it is sent and charged.
func TestAbandonedDecisionIsNotSent(t *testing.T) {
	ctx := context.Background()
	c := redistest.Standalone(t).Client()
	clock := testclock.New(time.UnixMilli(1_800_000_000_000))
	l, _ := newTestPair(t, c, clock, "eu")
	r := Rule{Limit: 100, Period: time.Minute, Floor: 0.5}
	l.decisions.mu.Lock()
	l.decisions.busy = true // a round trip in flight: the next decisions queue
	l.decisions.mu.Unlock()
	queued := func(n int) {
		for {
			l.decisions.mu.Lock()
			q := len(l.decisions.queue)
			l.decisions.mu.Unlock()
			if q == n {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	waiting, cancel := context.WithCancel(ctx)
	abandoned, live := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := l.Decide(waiting, "gone", r, testTopo, 1, "i")
		abandoned <- err
	}()
	queued(1)
	cancel()
	if err := <-abandoned; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned decision: %v, want context.Canceled", err)
	}
	go func() {
		_, err := l.Decide(ctx, "kept", r, testTopo, 1, "i")
		live <- err
	}()
	queued(2) // the abandoned one is still in the queue, marked
	l.decisions.mu.Lock()
	batch := l.decisions.take()
	l.decisions.mu.Unlock()
	l.decisions.fly(batch) // the round trip returns: the queue leaves
	if err := <-live; err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]int64{"gone": 50, "kept": 49} {
		res, err := l.Decide(ctx, k, r, testTopo, 0, "n")
		if err != nil || res.Remaining != want {
			t.Errorf("key %s after the batch: %+v, %v; want %d left", k, res, err, want)
		}
	}
}
