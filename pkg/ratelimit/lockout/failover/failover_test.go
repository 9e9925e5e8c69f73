package failover_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/extauthz/extauthz/internal/breaker"
	ratefailover "github.com/extauthz/extauthz/pkg/ratelimit/failover"
	"github.com/extauthz/extauthz/pkg/ratelimit/lockout"
	"github.com/extauthz/extauthz/pkg/ratelimit/lockout/failover"
	"github.com/extauthz/extauthz/pkg/ratelimit/lockout/lockouttest"
	"github.com/extauthz/extauthz/pkg/ratelimit/lockout/memstore"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

var login = lockout.Policy{Initial: time.Minute, Factor: 2, Max: time.Hour}

// flaky is a lockout.Store ("Redis") that fails every call with err while
// err is set, and counts the calls that reached it.
type flaky struct {
	lockout.Store
	err   error
	calls int
}

func (f *flaky) Locked(ctx context.Context, key string) (time.Duration, error) {
	f.calls++
	if f.err != nil {
		return 0, f.err
	}
	return f.Store.Locked(ctx, key)
}

func (f *flaky) Trip(ctx context.Context, key string, p lockout.Policy) (time.Duration, int64, error) {
	f.calls++
	if f.err != nil {
		return 0, 0, f.err
	}
	return f.Store.Trip(ctx, key, p)
}

type rig struct {
	s       *failover.Store
	primary *flaky
	reg     *prometheus.Registry
	now     time.Time
}

func newRig(t *testing.T, mode ratefailover.Mode) *rig {
	t.Helper()
	r := &rig{reg: prometheus.NewRegistry(), now: t0}
	now := func() time.Time { return r.now }
	r.primary = &flaky{Store: memstore.New(memstore.Config{Now: now})}
	var fallback *memstore.Store
	if mode == ratefailover.Open {
		fallback = memstore.New(memstore.Config{Now: now})
	}
	var err error
	r.s, err = failover.New(r.primary, failover.Options{Mode: mode, Fallback: fallback,
		StoreOptions: breaker.StoreOptions{Registerer: r.reg, Now: now, FailureThreshold: 2, CoolDown: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *rig) locked(t *testing.T, key string) time.Duration {
	t.Helper()
	d, err := r.s.Locked(context.Background(), key)
	if err != nil {
		t.Fatalf("Locked(%s): %v", key, err)
	}
	return d
}

func (r *rig) trip(t *testing.T, key string) (time.Duration, int64) {
	t.Helper()
	d, n, err := r.s.Trip(context.Background(), key, login)
	if err != nil {
		t.Fatalf("Trip(%s): %v", key, err)
	}
	return d, n
}

func (r *rig) metric(t *testing.T, name, reason string) float64 {
	t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == name && labelValue(m, "reason") == reason {
				return m.GetCounter().GetValue() + m.GetGauge().GetValue() // one of them is set
			}
		}
	}
	t.Fatalf("no %s{reason=%q}", name, reason)
	return 0
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// TestSuite: with Redis answering, the failover changes nothing of the
// store's behaviour.
func TestSuite(t *testing.T) {
	lockouttest.Run(t, lockouttest.Harness{
		New: func(t *testing.T) lockout.Store {
			s, err := failover.New(memstore.New(memstore.Config{}), failover.Options{
				Fallback: memstore.New(memstore.Config{}), StoreOptions: breaker.StoreOptions{Registerer: prometheus.NewRegistry()}})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		Advance: func(_ *testing.T, _ lockout.Store, d time.Duration) { time.Sleep(d) },
		Unit:    50 * time.Millisecond,
	})
}

// TestOpenModeDecidesInProcess: with Redis failing, the first calls get
// Redis's failure answered by the fallback; after two in a row the circuit
// opens and Redis is not called; a lockout seen in Redis before the outage
// still holds, a trip during it locks the key here; after the cool-down a
// probe that succeeds closes the circuit, and Redis decides again.
func TestOpenModeDecidesInProcess(t *testing.T) {
	r := newRig(t, ratefailover.Open)
	if d, n := r.trip(t, "seen"); d != time.Minute || n != 1 {
		t.Fatalf("trip on Redis = %v, %d", d, n)
	}
	r.primary.err = errors.New("redis down")
	for range 2 {
		if d := r.locked(t, "seen"); d != time.Minute {
			t.Fatalf("Locked of a key Redis had locked, Redis failing: %v, want 1m", d)
		}
	}
	calls := r.primary.calls
	if d, n := r.trip(t, "new"); d != time.Minute || n != 1 {
		t.Fatalf("trip during the outage = %v, %d; want a first trip in memory", d, n)
	}
	if d := r.locked(t, "new"); d != time.Minute {
		t.Fatalf("a key tripped during the outage: Locked %v, want 1m", d)
	}
	if r.primary.calls != calls {
		t.Fatalf("Redis called %d times with the circuit open", r.primary.calls-calls)
	}
	if got := r.metric(t, "extauthz_lockout_store_circuit_open", ""); got != 1 {
		t.Errorf("circuit gauge %v, want 1", got)
	}
	if got := r.metric(t, "extauthz_lockout_store_errors_total", ""); got != 2 {
		t.Errorf("errors %v, want 2", got)
	}
	if e, o := r.metric(t, "extauthz_lockout_fallback_decisions_total", "error"), r.metric(t, "extauthz_lockout_fallback_decisions_total", "circuit_open"); e != 2 || o != 2 {
		t.Errorf("fallback decisions error %v, circuit_open %v; want 2 and 2", e, o)
	}

	r.now = r.now.Add(time.Second)
	r.primary.err = nil
	if d := r.locked(t, "new"); d != 0 {
		t.Fatalf("Redis back: Locked %v, want Redis's answer 0 (the outage's trips stay in memory)", d)
	}
	if got := r.metric(t, "extauthz_lockout_store_circuit_open", ""); got != 0 {
		t.Errorf("circuit gauge %v after the probe, want 0", got)
	}
}

// TestClosedModeRefuses: with Redis failing, closed mode reports every key
// locked for DeniedRetryAfter and a trip fails; Redis is not called once
// the circuit is open.
func TestClosedModeRefuses(t *testing.T) {
	r := newRig(t, ratefailover.Closed)
	down := errors.New("redis down")
	r.primary.err = down
	for range 3 {
		if d := r.locked(t, "k"); d != failover.DefaultDeniedRetryAfter {
			t.Fatalf("Locked, Redis failing: %v, want %v", d, failover.DefaultDeniedRetryAfter)
		}
	}
	if _, _, err := r.s.Trip(context.Background(), "k", login); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("Trip, circuit open: %v, want ErrOpen", err)
	}
	if r.primary.calls != 2 {
		t.Fatalf("Redis called %d times, want 2 (then the circuit opened)", r.primary.calls)
	}
}

// TestNeutralErrors: an invalid policy and a cancelled caller are returned
// as they are and never open the circuit.
func TestNeutralErrors(t *testing.T) {
	r := newRig(t, ratefailover.Open)
	for range 3 {
		if _, _, err := r.s.Trip(context.Background(), "k", lockout.Policy{}); !errors.Is(err, lockout.ErrInvalid) {
			t.Fatalf("invalid policy: %v", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r.primary.err = context.Canceled
	for range 3 {
		if _, err := r.s.Locked(ctx, "k"); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled caller: %v, want its error", err)
		}
	}
	if got := r.metric(t, "extauthz_lockout_store_circuit_open", ""); got != 0 {
		t.Errorf("circuit gauge %v, want 0", got)
	}
}

func TestNewRejects(t *testing.T) {
	reg := prometheus.NewRegistry()
	so := breaker.StoreOptions{Registerer: reg}
	for name, tc := range map[string]struct {
		primary lockout.Store
		o       failover.Options
	}{
		"nil primary":       {nil, failover.Options{Mode: ratefailover.Closed, StoreOptions: so}},
		"open, no fallback": {memstore.New(memstore.Config{}), failover.Options{StoreOptions: so}},
		"bad mode":          {memstore.New(memstore.Config{}), failover.Options{Mode: "sometimes", StoreOptions: so}},
		"no registerer":     {memstore.New(memstore.Config{}), failover.Options{Mode: ratefailover.Closed}},
		"negative retry":    {memstore.New(memstore.Config{}), failover.Options{Mode: ratefailover.Closed, StoreOptions: so, DeniedRetryAfter: -1}},
	} {
		if _, err := failover.New(tc.primary, tc.o); !errors.Is(err, failover.ErrInvalidOptions) {
			t.Errorf("%s: %v, want ErrInvalidOptions", name, err)
		}
	}
}

// TestOpenModeKeepsARefusedKeyLocked: a key another replica locked in
// Redis, which this replica only saw refusing a request (Locked), stays
// locked here when Redis fails, for the time Redis said was left.
func TestOpenModeKeepsARefusedKeyLocked(t *testing.T) {
	r := newRig(t, ratefailover.Open)
	if _, _, err := r.primary.Store.Trip(context.Background(), "elsewhere", login); err != nil { // another replica's trip
		t.Fatal(err)
	}
	r.now = r.now.Add(10 * time.Second)
	if d := r.locked(t, "elsewhere"); d != 50*time.Second {
		t.Fatalf("Locked on Redis %v, want 50s", d)
	}
	r.primary.err = errors.New("redis down")
	if d := r.locked(t, "elsewhere"); d != 50*time.Second {
		t.Errorf("Redis failing: a key this replica saw locked answers %v, want still 50s", d)
	}
	if d := r.locked(t, "never-seen"); d != 0 {
		t.Errorf("Redis failing: a key never seen locked answers %v, want 0", d)
	}
}
