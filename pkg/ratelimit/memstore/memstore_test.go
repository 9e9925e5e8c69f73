package memstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// t0 is a fixed instant aligned to a day, hence to every window used here.
var t0 = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

// clock is a fake clock the tests move by hand.
type clock struct{ us atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.us.Store(t0.UnixMicro())
	return c
}

func (c *clock) Now() time.Time          { return time.UnixMicro(c.us.Load()) }
func (c *clock) set(d time.Duration)     { c.us.Store(t0.Add(d).UnixMicro()) }
func (c *clock) advance(d time.Duration) { c.us.Add(d.Microseconds()) }
func (c *clock) micros() int64           { return c.us.Load() }
func limit(a ratelimit.Algorithm, r int64, p time.Duration) ratelimit.Limit {
	return ratelimit.Limit{Algorithm: a, Requests: r, Period: p}
}

// newStore returns a Store on a fake clock, without the janitor, closed at
// the end of the test.
func newStore(t testing.TB, opts Options) (*Store, *clock) {
	t.Helper()
	c := newClock()
	opts.Now = c.Now
	if opts.SweepInterval == 0 {
		opts.SweepInterval = -1
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, c
}

func mustAllow(t *testing.T, s *Store, key string, l ratelimit.Limit, hits int64) ratelimit.Result {
	t.Helper()
	res, err := s.Allow(context.Background(), key, l, hits)
	if err != nil {
		t.Fatalf("Allow(%q, %+v, %d): %v", key, l, hits, err)
	}
	return res
}

// TestAllowEachAlgorithm: exactly the limit is admitted, the next hit is
// denied with a RetryAfter at which it is admitted, and hits > limit or
// hits == 0 charge nothing.
func TestAllowEachAlgorithm(t *testing.T) {
	t.Parallel()
	for _, a := range ratelimit.Algorithms() {
		t.Run(string(a), func(t *testing.T) {
			t.Parallel()
			s, c := newStore(t, Options{})
			l := limit(a, 5, time.Second)
			if res := mustAllow(t, s, "k", l, 6); res.Allowed {
				t.Fatalf("hits > limit admitted: %+v", res)
			}
			for i := range 5 {
				if res := mustAllow(t, s, "k", l, 1); !res.Allowed || res.Remaining != int64(4-i) {
					t.Fatalf("hit %d: %+v", i, res)
				}
			}
			peek := mustAllow(t, s, "k", l, 0)
			denied := mustAllow(t, s, "k", l, 1)
			if !peek.Allowed || peek.Remaining != 0 || denied.Allowed || denied.RetryAfter <= 0 {
				t.Fatalf("after the limit: peek %+v, next %+v", peek, denied)
			}
			c.advance(denied.RetryAfter - time.Microsecond)
			// sliding_window's estimate floors, so its RetryAfter is an upper
			// bound that may admit a little earlier; the others are exact.
			if res := mustAllow(t, s, "k", l, 0); a != ratelimit.SlidingWindow && res.Remaining != 0 {
				t.Fatalf("room 1µs before RetryAfter %v: %+v", denied.RetryAfter, res)
			}
			c.advance(time.Microsecond)
			if res := mustAllow(t, s, "k", l, 1); !res.Allowed {
				t.Fatalf("denied at RetryAfter %v: %+v", denied.RetryAfter, res)
			}
		})
	}
}

// TestStoreMatchesDecide replays random traffic through the store and
// through ratelimit.Decide with a hand-kept state: the store adds nothing
// to the algorithms (expiry, reclaiming and sharding are invisible).
func TestStoreMatchesDecide(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, a := range ratelimit.Algorithms() {
		s, c := newStore(t, Options{Shards: 1})
		l := ratelimit.Limit{Algorithm: a, Requests: 7, Period: 300 * time.Millisecond, Burst: 3}
		var st ratelimit.State
		for i := range 5000 {
			c.advance(time.Duration(rng.IntN(120_000)) * time.Microsecond)
			hits := int64(rng.IntN(4))
			got := mustAllow(t, s, "k", l, hits)
			want, next, _ := ratelimit.Decide(l, c.micros(), st, hits)
			if got != want {
				t.Fatalf("%s step %d: store %+v, Decide %+v", a, i, got, want)
			}
			if want.Allowed && hits > 0 {
				st = next
			}
			if i%50 == 0 { // other keys come and go in the same shard
				mustAllow(t, s, "other"+strconv.Itoa(i), l, 1)
			}
		}
	}
}

func TestHitsZeroChargesNothing(t *testing.T) {
	t.Parallel()
	for _, a := range ratelimit.Algorithms() {
		s, _ := newStore(t, Options{})
		l := limit(a, 2, time.Minute)
		for range 10 {
			mustAllow(t, s, "k", l, 0)
		}
		if res := mustAllow(t, s, "k", l, 2); !res.Allowed {
			t.Errorf("%s: hits 0 charged: %+v", a, res)
		}
		if st := s.Stats(); st.States != 1 {
			t.Errorf("%s: %d states after hits 0 and one charge, want 1", a, st.States)
		}
	}
}

// TestMultiLimitAllOrNone: 20/s with a burst, plus 100/min. Whichever limit
// denies, the other is not charged.
func TestMultiLimitAllOrNone(t *testing.T) {
	t.Parallel()
	s, c := newStore(t, Options{})
	perSec := limit(ratelimit.GCRA, 20, time.Second)
	perMin := limit(ratelimit.FixedWindow, 100, time.Minute)
	req := func(hits int64) ratelimit.Decision {
		t.Helper()
		ds, err := s.AllowBatch(context.Background(), []ratelimit.Request{
			{Key: "k", Limits: []ratelimit.Limit{perSec, perMin}, Hits: hits}})
		if err != nil {
			t.Fatal(err)
		}
		return ds[0]
	}
	for i := range 20 {
		if d := req(1); !d.Allowed {
			t.Fatalf("burst hit %d denied: %+v", i, d)
		}
	}
	d := req(1)
	if d.Allowed || d.Results[0].Allowed || !d.Results[1].Allowed {
		t.Fatalf("21st: want denied by the per-second limit only, got %+v", d)
	}
	if peek := req(0); peek.Results[1].Remaining != 80 {
		t.Fatalf("per-minute charged by a denied request: %+v", peek.Results[1])
	}
	// Spend the minute: 4 more bursts of 20, one per second.
	for range 4 {
		c.advance(time.Second)
		if d := req(20); !d.Allowed {
			t.Fatalf("burst of 20 denied: %+v", d)
		}
	}
	c.advance(time.Second)
	d = req(1)
	if d.Allowed || !d.Results[0].Allowed || d.Results[1].Allowed {
		t.Fatalf("101st: want denied by the per-minute limit only, got %+v", d)
	}
	if peek := req(0); peek.Results[0].Remaining != 20 {
		t.Fatalf("per-second charged by a denied request: %+v", peek.Results[0])
	}
}

func TestAllowBatchIndependentRequests(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t, Options{})
	l := limit(ratelimit.SlidingLog, 1, time.Minute)
	reqs := []ratelimit.Request{
		{Key: "a", Limits: []ratelimit.Limit{l}, Hits: 1},
		{Key: "a", Limits: []ratelimit.Limit{l}, Hits: 1}, // sees the first's charge
		{Key: "b", Limits: []ratelimit.Limit{l}, Hits: 1},
	}
	ds, err := s.AllowBatch(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	if !ds[0].Allowed || ds[1].Allowed || !ds[2].Allowed || len(ds[1].Results) != 1 {
		t.Fatalf("decisions %+v", ds)
	}
	// The same state is shared with Allow.
	if res := mustAllow(t, s, "b", l, 1); res.Allowed {
		t.Fatalf("Allow does not see AllowBatch's charge: %+v", res)
	}
}

func TestBadInputIsAnErrorAndChargesNothing(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t, Options{})
	ctx := context.Background()
	good := limit(ratelimit.GCRA, 1, time.Minute)
	if _, err := s.Allow(ctx, "k", limit("leaky", 1, time.Second), 1); !errors.Is(err, ratelimit.ErrInvalidLimit) {
		t.Errorf("unknown algorithm: %v", err)
	}
	if _, err := s.Allow(ctx, "k", good, -1); !errors.Is(err, ratelimit.ErrInvalidHits) {
		t.Errorf("negative hits: %v", err)
	}
	bad := [][]ratelimit.Request{
		{{Key: "k", Hits: 1}},
		{{Key: "k", Limits: []ratelimit.Limit{good}, Hits: -1}},
		{{Key: "k", Limits: []ratelimit.Limit{good, {Requests: 5, Period: time.Minute}}, Hits: 1}},
		{{Key: "k", Limits: []ratelimit.Limit{good, {Requests: 0, Period: time.Second}}, Hits: 1}},
	}
	for i, reqs := range bad {
		// A good request first: a bad one anywhere fails the whole batch.
		reqs = append([]ratelimit.Request{{Key: "k", Limits: []ratelimit.Limit{good}, Hits: 1}}, reqs...)
		if ds, err := s.AllowBatch(ctx, reqs); err == nil || ds != nil {
			t.Errorf("batch %d: want an error, got %v, %+v", i, err, ds)
		}
	}
	if st := s.Stats(); st.States != 0 {
		t.Errorf("rejected input left %d states", st.States)
	}
	if ds, err := s.AllowBatch(ctx, nil); err != nil || len(ds) != 0 {
		t.Errorf("empty batch: %v, %+v", err, ds)
	}
}

func TestCloseAndContext(t *testing.T) {
	t.Parallel()
	s, err := New(Options{SweepInterval: time.Hour}) // with the janitor
	if err != nil {
		t.Fatal(err)
	}
	l := limit(ratelimit.GCRA, 1, time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Allow(ctx, "k", l, 1); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled context: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Allow(context.Background(), "k", l, 1); !errors.Is(err, ratelimit.ErrClosed) {
		t.Errorf("Allow after Close: %v", err)
	}
	reqs := []ratelimit.Request{{Key: "k", Limits: []ratelimit.Limit{l}, Hits: 1}}
	if _, err := s.AllowBatch(context.Background(), reqs); !errors.Is(err, ratelimit.ErrClosed) {
		t.Errorf("AllowBatch after Close: %v", err)
	}
}

func TestNewOptions(t *testing.T) {
	t.Parallel()
	for _, o := range []Options{{Shards: 3}, {Shards: -1}, {Shards: 1 << 17}, {MaxKeys: -1}, {Shards: 64, MaxKeys: 10}} {
		if _, err := New(o); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("New(%+v) error = %v, want ErrInvalidOptions", o, err)
		}
	}
	for _, c := range []struct {
		o      Options
		shards int
	}{
		{Options{}, DefaultShards}, {Options{Shards: 1}, 1}, {Options{MaxKeys: 10}, 8}, {Options{MaxKeys: 1}, 1},
	} {
		c.o.SweepInterval = -1
		s, err := New(c.o)
		if err != nil {
			t.Fatalf("New(%+v): %v", c.o, err)
		}
		if len(s.shards) != c.shards {
			t.Errorf("New(%+v): %d shards, want %d", c.o, len(s.shards), c.shards)
		}
		_ = s.Close()
	}
}

// TestConcurrentOneKey: 64 goroutines race on one key limited to 1000 per
// hour; exactly 1000 are admitted. Run with -race.
func TestConcurrentOneKey(t *testing.T) {
	t.Parallel()
	for _, a := range ratelimit.Algorithms() {
		t.Run(string(a), func(t *testing.T) {
			t.Parallel()
			s, _ := newStore(t, Options{})
			l := limit(a, 1000, time.Hour)
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for g := range 64 {
				wg.Go(func() {
					for i := range 40 {
						var ok bool
						if (g+i)%2 == 0 {
							res, err := s.Allow(context.Background(), "hot", l, 1)
							ok = err == nil && res.Allowed
						} else {
							ds, err := s.AllowBatch(context.Background(),
								[]ratelimit.Request{{Key: "hot", Limits: []ratelimit.Limit{l}, Hits: 1}})
							ok = err == nil && ds[0].Allowed
						}
						if ok {
							admitted.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if n := admitted.Load(); n != 1000 {
				t.Fatalf("admitted %d of 2560, want exactly 1000", n)
			}
		})
	}
}

func TestDefaultClock(t *testing.T) {
	t.Parallel()
	s, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if d := time.Since(time.UnixMicro(s.now())); d < -time.Second || d > time.Second {
		t.Fatalf("default clock is %v away from time.Now", d)
	}
	l := limit(ratelimit.GCRA, 1, time.Hour)
	mustAllow(t, s, "k", l, 1)
	res := mustAllow(t, s, "k", l, 1)
	if res.Allowed || res.RetryAfter < 59*time.Minute || res.RetryAfter > time.Hour {
		t.Fatalf("second hit within the hour: %+v", res)
	}
}

// TestClockNeverStepsBackInAShard: a reading older than one already used is
// taken as the newer one, so a log entry is never inserted mid-log.
func TestClockNeverStepsBackInAShard(t *testing.T) {
	t.Parallel()
	s, c := newStore(t, Options{Shards: 1})
	l := limit(ratelimit.SlidingLog, 3, time.Second)
	c.set(500 * time.Millisecond)
	mustAllow(t, s, "a", l, 1)
	c.set(200 * time.Millisecond) // another key, same shard: still 500ms
	if res := mustAllow(t, s, "b", l, 1); res.ResetAfter != time.Second {
		t.Fatalf("decided at the earlier reading: %+v", res)
	}
	if res := mustAllow(t, s, "a", l, 1); res.ResetAfter != time.Second {
		t.Fatalf("entry inserted before the newest: %+v", res)
	}
}
