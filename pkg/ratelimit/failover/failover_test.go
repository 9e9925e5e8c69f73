package failover_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/failover"
	"github.com/extauthz/extauthz/pkg/ratelimit/memstore"
)

var errDown = errors.New("connection refused")

// flaky is a primary that fails while down is set and counts its calls.
type flaky struct {
	mu    sync.Mutex
	down  bool
	calls int
}

func (f *flaky) set(down bool) { f.mu.Lock(); f.down = down; f.mu.Unlock() }

func (f *flaky) count() int { f.mu.Lock(); defer f.mu.Unlock(); return f.calls }

func (f *flaky) Allow(ctx context.Context, key string, l ratelimit.Limit, hits int64) (ratelimit.Result, error) {
	d, err := f.AllowBatch(ctx, []ratelimit.Request{{Key: key, Limits: []ratelimit.Limit{l}, Hits: hits}})
	if err != nil {
		return ratelimit.Result{}, err
	}
	return d[0].Results[0], nil
}

// AllowBatch admits everything with Remaining 42, so answers from the
// primary are recognisable.
func (f *flaky) AllowBatch(ctx context.Context, reqs []ratelimit.Request) ([]ratelimit.Decision, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, r := range reqs {
		for _, l := range r.Limits {
			if err := l.Validate(); err != nil {
				return nil, err
			}
		}
	}
	if f.down {
		return nil, errDown
	}
	out := make([]ratelimit.Decision, len(reqs))
	for i, r := range reqs {
		out[i] = ratelimit.Decision{Allowed: true, Results: make([]ratelimit.Result, len(r.Limits))}
		for j := range r.Limits {
			out[i].Results[j] = ratelimit.Result{Allowed: true, Remaining: 42}
		}
	}
	return out, nil
}

func (f *flaky) Close() error { return nil }

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *fakeClock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func newMem(t *testing.T, now func() time.Time) ratelimit.Store {
	t.Helper()
	m, err := memstore.New(memstore.Options{Now: now, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

var oneMinute = ratelimit.Limit{Requests: 2, Period: time.Minute, Algorithm: ratelimit.FixedWindow}

// TestCircuitOpensProbesAndRecovers walks the breaker through its states on
// a fake clock.
func TestCircuitOpensProbesAndRecovers(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{t: time.Unix(1_700_006_400, 0)}
	primary := &flaky{down: true}
	reg := prometheus.NewRegistry()
	s, err := failover.New(primary, failover.Options{
		Fallback: newMem(t, clk.now), Registerer: reg, Now: clk.now,
		FailureThreshold: 3, CoolDown: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	allow := func() ratelimit.Result {
		t.Helper()
		res, err := s.Allow(ctx, "k", oneMinute, 1)
		if err != nil {
			t.Fatalf("Allow: %v", err)
		}
		return res
	}
	for i := 0; i < 3; i++ {
		allow()
	}
	if primary.count() != 3 {
		t.Fatalf("primary called %d times, want 3", primary.count())
	}
	// Open: the fallback decides alone, and enforces the limit (2 per minute
	// were used by the three calls above: the third was denied).
	if res := allow(); res.Allowed || primary.count() != 3 {
		t.Fatalf("open circuit: %+v, primary calls %d; want a fallback denial without the primary", res, primary.count())
	}
	if err := s.Ready(ctx); err == nil || !strings.Contains(err.Error(), "circuit open") {
		t.Fatalf("Ready with an open circuit: %v", err)
	}
	// Cool-down over, still down: one probe, then open again.
	clk.add(time.Second)
	allow()
	allow()
	if primary.count() != 4 {
		t.Fatalf("after cool-down: primary called %d times, want 4 (one probe)", primary.count())
	}
	// Recovered: the next probe succeeds and closes the circuit.
	primary.set(false)
	clk.add(time.Second)
	if res := allow(); res.Remaining != 42 {
		t.Fatalf("probe after recovery: %+v, want the primary's answer", res)
	}
	if res := allow(); res.Remaining != 42 || primary.count() != 6 {
		t.Fatalf("closed circuit: %+v after %d primary calls, want the primary's answer", res, primary.count())
	}
	if err := s.Ready(ctx); err != nil {
		t.Fatalf("Ready after recovery: %v", err)
	}
	wantMetrics(t, reg, map[string]float64{
		"extauthz_redis_errors_total":                                    4,
		`extauthz_redis_fallback_decisions_total{reason="error"}`:        4,
		`extauthz_redis_fallback_decisions_total{reason="circuit_open"}`: 2,
		"extauthz_redis_circuit_open":                                    0,
	})
}

// TestClosedModeDenies: with the primary failing, every request is denied
// with the configured RetryAfter and the limit it names.
func TestClosedModeDenies(t *testing.T) {
	t.Parallel()
	s, err := failover.New(&flaky{down: true}, failover.Options{
		Mode: failover.Closed, Registerer: prometheus.NewRegistry(), DeniedRetryAfter: 3 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	gcra := ratelimit.Limit{Requests: 5, Burst: 9, Period: time.Second}
	d, err := s.AllowBatch(context.Background(), []ratelimit.Request{{Key: "k", Limits: []ratelimit.Limit{oneMinute, gcra}, Hits: 0}})
	if err != nil {
		t.Fatal(err)
	}
	want := []ratelimit.Result{
		{Limit: 2, ResetAfter: 3 * time.Second, RetryAfter: 3 * time.Second},
		{Limit: 9, ResetAfter: 3 * time.Second, RetryAfter: 3 * time.Second},
	}
	if d[0].Allowed || d[0].Results[0] != want[0] || d[0].Results[1] != want[1] {
		t.Fatalf("closed mode: %+v, want denied %+v", d[0], want)
	}
}

// TestCallerErrorsDoNotFallBack: bad input and a cancelled caller are
// returned as errors and never count against the primary.
func TestCallerErrorsDoNotFallBack(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	s, err := failover.New(&flaky{}, failover.Options{Fallback: newMem(t, nil), Registerer: reg, FailureThreshold: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Allow(context.Background(), "k", ratelimit.Limit{}, 1); !errors.Is(err, ratelimit.ErrInvalidLimit) {
		t.Fatalf("invalid limit: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Allow(ctx, "k", oneMinute, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller: %v", err)
	}
	if err := s.Ready(context.Background()); err != nil {
		t.Fatalf("caller errors opened the circuit: %v", err)
	}
	wantMetrics(t, reg, map[string]float64{"extauthz_redis_errors_total": 0})
}

func TestNewRejectsBadOptions(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	cases := map[string]struct {
		primary ratelimit.Store
		opts    failover.Options
	}{
		"nil primary":       {nil, failover.Options{Mode: failover.Closed, Registerer: reg}},
		"nil registerer":    {&flaky{}, failover.Options{Mode: failover.Closed}},
		"open, no fallback": {&flaky{}, failover.Options{Registerer: reg}},
		"unknown mode":      {&flaky{}, failover.Options{Mode: "maybe", Registerer: reg}},
		"negative cooldown": {&flaky{}, failover.Options{Mode: failover.Closed, Registerer: reg, CoolDown: -1}},
	}
	for name, tc := range cases {
		if _, err := failover.New(tc.primary, tc.opts); !errors.Is(err, failover.ErrInvalidOptions) {
			t.Errorf("%s: %v, want ErrInvalidOptions", name, err)
		}
	}
}

// wantMetrics compares samples of reg, named as name or name{label="v"}.
func wantMetrics(t *testing.T, reg *prometheus.Registry, want map[string]float64) {
	t.Helper()
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "reason" {
					name += `{reason="` + lp.GetValue() + `"}`
				}
			}
			got[name] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	for name, v := range want {
		if got[name] != v {
			t.Errorf("metric %s = %v, want %v (all: %v)", name, got[name], v, got)
		}
	}
}
