package guard_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/ratelimit/inflight"
	"github.com/extauthz/extauthz/pkg/ratelimit/inflight/guard"
	"github.com/extauthz/extauthz/pkg/ratelimit/inflight/inflighttest"
	"github.com/extauthz/extauthz/pkg/ratelimit/inflight/memstore"
)

// clocked is a guarded memory store with its clock, for Advance.
type clocked struct {
	*guard.Store
	ns *atomic.Int64
}

// TestSuite: a closed guard changes nothing of the store's behaviour.
func TestSuite(t *testing.T) {
	inflighttest.Run(t, inflighttest.Harness{
		New: func(t *testing.T) inflight.Store {
			ns := &atomic.Int64{}
			ns.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
			now := func() time.Time { return time.Unix(0, ns.Load()) }
			s, err := guard.New(memstore.New(memstore.Config{Now: now}), guard.Options{Registerer: prometheus.NewRegistry(), Now: now})
			if err != nil {
				t.Fatal(err)
			}
			return clocked{s, ns}
		},
		Advance: func(_ *testing.T, s inflight.Store, d time.Duration) { s.(clocked).ns.Add(int64(d)) },
		TTL:     10 * time.Second,
	})
}

// flaky fails every call with err while err is set, and counts calls.
type flaky struct {
	inflight.Store
	err   error
	calls int
}

func (f *flaky) Acquire(ctx context.Context, key string, limit int, ttl time.Duration) (inflight.Slot, inflight.Result, error) {
	f.calls++
	if f.err != nil {
		return "", inflight.Result{}, f.err
	}
	return f.Store.Acquire(ctx, key, limit, ttl)
}

func (f *flaky) Release(ctx context.Context, key string, slot inflight.Slot) (bool, error) {
	f.calls++
	if f.err != nil {
		return false, f.err
	}
	return f.Store.Release(ctx, key, slot)
}

type rig struct {
	s     *guard.Store
	inner *flaky
	reg   *prometheus.Registry
	now   time.Time
	opens []bool
}

func newRig(t *testing.T) *rig {
	t.Helper()
	r := &rig{reg: prometheus.NewRegistry(), now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	now := func() time.Time { return r.now }
	r.inner = &flaky{Store: memstore.New(memstore.Config{Now: now})}
	var err error
	r.s, err = guard.New(r.inner, guard.Options{Registerer: r.reg, Now: now, FailureThreshold: 2, CoolDown: time.Second,
		OnChange: func(_ string, open bool, _ error) { r.opens = append(r.opens, open) }})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *rig) gauge(t *testing.T) float64 {
	t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil || len(mfs) != 1 || mfs[0].GetName() != "extauthz_inflight_store_circuit_open" {
		t.Fatalf("gathered %v, %v; want the circuit gauge alone", mfs, err)
	}
	return mfs[0].GetMetric()[0].GetGauge().GetValue()
}

// TestOpensAndRecovers: two failures in a row open the circuit (gauge 1,
// OnChange told); calls then fail with inflight.ErrUnavailable without
// reaching the store, Release of an earlier slot included; after the
// cool-down one probe reaches it and its success closes the circuit.
func TestOpensAndRecovers(t *testing.T) {
	r, ctx := newRig(t), context.Background()
	slot, _, err := r.s.Acquire(ctx, "k", 5, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	down := errors.New("redis down")
	r.inner.err = down
	for range 2 {
		if _, _, err := r.s.Acquire(ctx, "k", 5, time.Minute); !errors.Is(err, down) {
			t.Fatalf("failing store: %v, want its error", err)
		}
	}
	calls := r.inner.calls
	if _, _, err := r.s.Acquire(ctx, "k", 5, time.Minute); !errors.Is(err, inflight.ErrUnavailable) {
		t.Fatalf("open circuit: %v, want ErrUnavailable", err)
	}
	if _, err := r.s.Release(ctx, "k", slot); !errors.Is(err, inflight.ErrUnavailable) {
		t.Fatalf("Release, open circuit: %v, want ErrUnavailable", err)
	}
	if r.inner.calls != calls {
		t.Errorf("the store was called %d times while the circuit was open", r.inner.calls-calls)
	}
	if g := r.gauge(t); g != 1 {
		t.Errorf("circuit gauge %v, want 1", g)
	}
	r.inner.err = nil
	r.now = r.now.Add(time.Second)
	if released, err := r.s.Release(ctx, "k", slot); err != nil || !released {
		t.Fatalf("probe after the cool-down: %v, %v; want the slot released", released, err)
	}
	if g := r.gauge(t); g != 0 || len(r.opens) != 2 || !r.opens[0] || r.opens[1] {
		t.Errorf("after recovery: gauge %v, transitions %v; want 0 and [open, closed]", g, r.opens)
	}
}

// TestNeutralErrorsNeverOpen: invalid arguments and a caller that
// cancelled say nothing about the store.
func TestNeutralErrorsNeverOpen(t *testing.T) {
	r := newRig(t)
	for range 3 {
		if _, _, err := r.s.Acquire(context.Background(), "k", 0, time.Minute); !errors.Is(err, inflight.ErrInvalid) {
			t.Fatalf("limit 0: %v, want ErrInvalid", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r.inner.err = context.Canceled
	for range 3 {
		_, _, _ = r.s.Acquire(ctx, "k", 5, time.Minute)
	}
	r.inner.err = nil
	if _, _, err := r.s.Acquire(context.Background(), "k", 5, time.Minute); err != nil {
		t.Errorf("after neutral errors: %v, want the circuit closed", err)
	}
}

func TestNewRejects(t *testing.T) {
	reg := prometheus.NewRegistry()
	for name, c := range map[string]struct {
		inner inflight.Store
		opts  guard.Options
	}{
		"nil inner":          {nil, guard.Options{Registerer: reg}},
		"nil registerer":     {memstore.New(memstore.Config{}), guard.Options{}},
		"negative threshold": {memstore.New(memstore.Config{}), guard.Options{Registerer: reg, FailureThreshold: -1}},
	} {
		if _, err := guard.New(c.inner, c.opts); !errors.Is(err, guard.ErrInvalidOptions) {
			t.Errorf("%s: %v, want ErrInvalidOptions", name, err)
		}
	}
}
