package overlimit_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/memstore"
	"github.com/extauthz/extauthz/pkg/ratelimit/overlimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/redisstore"
)

// counting counts the requests that reach the inner store.
type counting struct {
	ratelimit.Store
	reqs atomic.Int64
}

func (c *counting) AllowBatch(ctx context.Context, reqs []ratelimit.Request) ([]ratelimit.Decision, error) {
	c.reqs.Add(int64(len(reqs)))
	return c.Store.AllowBatch(ctx, reqs)
}

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func newCached(t *testing.T, inner ratelimit.Store, clk *fakeClock) (*overlimit.Store, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	s, err := overlimit.New(inner, overlimit.Options{Registerer: reg, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, reg
}

func newMem(t *testing.T, clk *fakeClock) *counting {
	t.Helper()
	m, err := memstore.New(memstore.Options{Now: clk.now, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	return &counting{Store: m}
}

// TestDeniedKeyIsAnsweredLocallyUntilRetryAfter: after the store denies a
// request, the same request is denied without the store until its
// RetryAfter has passed, then the store is asked (and admits) again.
func TestDeniedKeyIsAnsweredLocallyUntilRetryAfter(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{t: time.Unix(1_700_006_400, 0)}
	inner := newMem(t, clk)
	s, reg := newCached(t, inner, clk)
	ctx := context.Background()
	l := ratelimit.Limit{Requests: 2, Period: time.Second} // GCRA, T = 500ms
	for i := 0; i < 3; i++ {
		if _, err := s.Allow(ctx, "k", l, 1); err != nil {
			t.Fatal(err)
		}
	}
	if got := inner.reqs.Load(); got != 3 {
		t.Fatalf("store asked %d times for 3 calls, want 3", got)
	}
	clk.t = clk.t.Add(200 * time.Millisecond)
	res, err := s.Allow(ctx, "k", l, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := ratelimit.Result{Limit: 2, ResetAfter: 800 * time.Millisecond, RetryAfter: 300 * time.Millisecond}
	if res != want || inner.reqs.Load() != 3 {
		t.Fatalf("cached answer %+v (store asked %d times), want %+v without the store", res, inner.reqs.Load(), want)
	}
	if got := metricValue(t, reg, "extauthz_ratelimit_local_cache_hits_total"); got != 1 {
		t.Fatalf("cache hits metric %v, want 1", got)
	}
	clk.t = clk.t.Add(300 * time.Millisecond)
	res, err = s.Allow(ctx, "k", l, 1)
	if err != nil || !res.Allowed || inner.reqs.Load() != 4 {
		t.Fatalf("at RetryAfter: %+v, %v, store asked %d times; want admitted by the store", res, err, inner.reqs.Load())
	}
}

// TestFewerHitsAreNotCovered: a denial of 5 hits says nothing about 1 hit.
func TestFewerHitsAreNotCovered(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{t: time.Unix(1_700_006_400, 0)}
	inner := newMem(t, clk)
	s, _ := newCached(t, inner, clk)
	ctx := context.Background()
	l := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Requests: 3, Period: time.Minute}
	if res, _ := s.Allow(ctx, "k", l, 5); res.Allowed {
		t.Fatal("5 hits admitted under a limit of 3")
	}
	if res, _ := s.Allow(ctx, "k", l, 1); !res.Allowed {
		t.Fatal("1 hit denied from the cache after a denial of 5 hits")
	}
	if res, _ := s.Allow(ctx, "k", l, 7); res.Allowed || inner.reqs.Load() != 2 {
		t.Fatalf("7 hits after a denial of 5: allowed %v, store asked %d times; want a cached denial", res.Allowed, inner.reqs.Load())
	}
}

// TestRaisedOverrideLimitIsNotDeniedByCache is envoyproxy/ratelimit#1077 on
// real Redis: a key denied under 2/min is admitted at once when the
// descriptor's limit override raises it to 100/min.
func TestRaisedOverrideLimitIsNotDeniedByCache(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	rs, err := redisstore.New(srv.Client(), redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	inner := &counting{Store: rs}
	reg := prometheus.NewRegistry()
	s, err := overlimit.New(inner, overlimit.Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := ratelimit.Key("", "rls", []ratelimit.Entry{{Key: "user", Value: "alice"}})
	low := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Requests: 2, Period: time.Minute}
	high := low
	high.Requests = 100
	for i := 0; i < 4; i++ {
		_, _ = s.Allow(ctx, key, low, 1)
	}
	if inner.reqs.Load() != 3 {
		t.Fatalf("store asked %d times, want 3 (the 4th call answered from the cache)", inner.reqs.Load())
	}
	res, err := s.Allow(ctx, key, high, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Allowed || res.Limit != 100 {
		t.Fatalf("raised override: %+v, want admitted under 100", res)
	}
	if res, _ := s.Allow(ctx, key, low, 1); res.Allowed {
		t.Fatal("the old, lower limit admitted again")
	}
}

// TestBatchMixesCachedAndStoreAnswers: only the uncached requests reach the
// store, and answers keep their order.
func TestBatchMixesCachedAndStoreAnswers(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{t: time.Unix(1_700_006_400, 0)}
	inner := newMem(t, clk)
	s, _ := newCached(t, inner, clk)
	ctx := context.Background()
	one := ratelimit.Limit{Algorithm: ratelimit.SlidingLog, Requests: 1, Period: time.Minute}
	req := func(k string) ratelimit.Request {
		return ratelimit.Request{Key: k, Limits: []ratelimit.Limit{one}, Hits: 1}
	}
	if _, err := s.AllowBatch(ctx, []ratelimit.Request{req("a"), req("a")}); err != nil {
		t.Fatal(err)
	}
	before := inner.reqs.Load()
	d, err := s.AllowBatch(ctx, []ratelimit.Request{req("b"), req("a"), req("c")})
	if err != nil {
		t.Fatal(err)
	}
	if !d[0].Allowed || d[1].Allowed || !d[2].Allowed {
		t.Fatalf("decisions %+v, want b and c admitted, a denied", d)
	}
	if got := inner.reqs.Load() - before; got != 2 {
		t.Fatalf("store asked for %d requests, want 2", got)
	}
}

func TestBoundedEntries(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{t: time.Unix(1_700_006_400, 0)}
	inner := newMem(t, clk)
	reg := prometheus.NewRegistry()
	s, err := overlimit.New(inner, overlimit.Options{Registerer: reg, Now: clk.now, MaxEntries: 64})
	if err != nil {
		t.Fatal(err)
	}
	l := ratelimit.Limit{Requests: 1, Period: time.Hour, Algorithm: ratelimit.FixedWindow}
	for i := 0; i < 5000; i++ {
		_, _ = s.Allow(context.Background(), fmt.Sprint(i), l, 2)
	}
	if n := metricValue(t, reg, "extauthz_ratelimit_local_cache_entries"); n > 64+32 {
		t.Fatalf("%v entries, want about 64 at most", n)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	t.Parallel()
	if _, err := overlimit.New(nil, overlimit.Options{Registerer: prometheus.NewRegistry()}); !errors.Is(err, overlimit.ErrInvalidOptions) {
		t.Errorf("nil inner: %v", err)
	}
	clk := &fakeClock{}
	if _, err := overlimit.New(newMem(t, clk), overlimit.Options{}); !errors.Is(err, overlimit.ErrInvalidOptions) {
		t.Errorf("nil registerer: %v", err)
	}
}

// metricValue sums the samples of one metric family of reg.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		v := 0.0
		for _, m := range mf.GetMetric() {
			v += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
		return v
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

// TestDenialCoversOnlyItsLimits: a denial remembered for a request of two
// limits answers that request, not one with the first limit alone, nor one
// whose second limit differs.
func TestDenialCoversOnlyItsLimits(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{t: time.Unix(1_700_006_400, 0)}
	inner := newMem(t, clk)
	s, _ := newCached(t, inner, clk)
	ctx := context.Background()
	wide := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Requests: 100, Period: time.Minute}
	tight := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Requests: 1, Period: time.Hour}
	ask := func(limits ...ratelimit.Limit) bool {
		t.Helper()
		d, err := s.AllowBatch(ctx, []ratelimit.Request{{Key: "k", Hits: 2, Limits: limits}})
		if err != nil {
			t.Fatal(err)
		}
		return d[0].Allowed
	}
	for range 2 {
		if ask(wide, tight) {
			t.Fatal("[wide tight] admitted 2 hits under a limit of 1")
		}
	}
	if inner.reqs.Load() != 1 {
		t.Fatalf("two denials of [wide tight] asked the store %d times, want once", inner.reqs.Load())
	}
	if !ask(wide) || inner.reqs.Load() != 2 {
		t.Fatalf("[wide] alone: store asked %d times in all, want it admitted by the store", inner.reqs.Load())
	}
	other := tight
	other.Requests = 5
	if !ask(wide, other) || inner.reqs.Load() != 3 {
		t.Fatalf("[wide other]: store asked %d times in all, want it admitted by the store", inner.reqs.Load())
	}
}

// TestRememberedDenialIsItsOwn: a caller changing the decision it got does
// not change the denial the cache remembers from it.
func TestRememberedDenialIsItsOwn(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{t: time.Unix(1_700_006_400, 0)}
	s, _ := newCached(t, newMem(t, clk), clk)
	ctx := context.Background()
	reqs := []ratelimit.Request{{Key: "k", Hits: 5, Limits: []ratelimit.Limit{{Algorithm: ratelimit.FixedWindow, Requests: 3, Period: time.Minute}}}}
	d, err := s.AllowBatch(ctx, reqs)
	if err != nil || d[0].Allowed {
		t.Fatalf("5 hits under 3: %+v, %v; want denied", d, err)
	}
	d[0].Results[0].Limit = 999
	again, err := s.AllowBatch(ctx, reqs)
	if err != nil || again[0].Results[0].Limit != 3 {
		t.Fatalf("remembered denial %+v, %v; want its limit 3", again, err)
	}
}
