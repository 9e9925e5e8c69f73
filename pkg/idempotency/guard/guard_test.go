package guard_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/internal/testclock"
	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/idempotency/guard"
	"github.com/extauthz/extauthz/pkg/idempotency/memstore"
	"github.com/extauthz/extauthz/pkg/idempotency/storetest"
)

var (
	t0      = time.Unix(1_700_000_000, 0)
	errDown = errors.New("dial tcp 127.0.0.1:6380: connection refused")
	ttls    = idempotency.TTLs{Lease: 30 * time.Second, Record: time.Hour}
	lease   = idempotency.Lease{Scope: "acme", Key: "k", Token: "t0k3n", TTLs: ttls}
	fp      = idempotency.NewFingerprint("POST", "/orders", nil, nil)
)

// fake is an inner store whose every method returns err (nil: Begin
// acquires) and counts its calls.
type fake struct {
	mu    sync.Mutex
	err   error
	calls int
}

func (f *fake) set(err error) { f.mu.Lock(); f.err = err; f.mu.Unlock() }

func (f *fake) get() error { f.mu.Lock(); defer f.mu.Unlock(); return f.err }

func (f *fake) count() int { f.mu.Lock(); defer f.mu.Unlock(); return f.calls }

func (f *fake) answer() error { f.mu.Lock(); defer f.mu.Unlock(); f.calls++; return f.err }

func (f *fake) Begin(context.Context, string, string, idempotency.Fingerprint, idempotency.TTLs) (idempotency.Outcome, error) {
	if err := f.answer(); err != nil {
		return idempotency.Outcome{}, err
	}
	return idempotency.Outcome{Kind: idempotency.Acquired, Lease: lease}, nil
}

func (f *fake) Complete(context.Context, idempotency.Lease, idempotency.Response) error {
	return f.answer()
}
func (f *fake) Release(context.Context, idempotency.Lease) error { return f.answer() }
func (f *fake) Renew(context.Context, idempotency.Lease) error   { return f.answer() }
func (f *fake) Close() error                                     { return nil }

type fixture struct {
	inner *fake
	store *guard.Store
	clock *testclock.Clock
	reg   *prometheus.Registry
}

// newFixture wraps a fake with threshold 3 and a 1s cool-down.
func newFixture(t *testing.T) fixture {
	t.Helper()
	f := fixture{inner: &fake{}, clock: testclock.New(t0), reg: prometheus.NewRegistry()}
	s, err := guard.New(f.inner, guard.Options{Registerer: f.reg, FailureThreshold: 3, CoolDown: time.Second, Now: f.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	f.store = s
	return f
}

// calls are the four methods, each with valid arguments.
var calls = []struct {
	name string
	do   func(context.Context, idempotency.Store) error
}{
	{"Begin", func(ctx context.Context, s idempotency.Store) error {
		_, err := s.Begin(ctx, "acme", "k", fp, ttls)
		return err
	}},
	{"Complete", func(ctx context.Context, s idempotency.Store) error {
		return s.Complete(ctx, lease, idempotency.Response{Status: 201})
	}},
	{"Release", func(ctx context.Context, s idempotency.Store) error { return s.Release(ctx, lease) }},
	{"Renew", func(ctx context.Context, s idempotency.Store) error { return s.Renew(ctx, lease) }},
}

func (f fixture) circuitOpen() float64 { return f.value("extauthz_idempotency_store_circuit_open") }

func (f fixture) errorsTotal() float64 { return f.value("extauthz_idempotency_store_errors_total") }

// value reads one unlabelled metric from the fixture's registry.
func (f fixture) value(name string) float64 {
	mfs, err := f.reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		return m.GetGauge().GetValue() + m.GetCounter().GetValue()
	}
	panic("metric not registered: " + name)
}

// fail makes n calls (cycling through the methods) that the inner store fails.
func (f fixture) fail(t *testing.T, n int) {
	t.Helper()
	f.inner.set(errDown)
	for i := range n {
		c := calls[i%len(calls)]
		if err := c.do(context.Background(), f.store); !errors.Is(err, errDown) {
			t.Fatalf("%s: error = %v, want the inner store's", c.name, err)
		}
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	for name, c := range map[string]struct {
		inner idempotency.Store
		opts  guard.Options
	}{
		"nil inner":          {nil, guard.Options{Registerer: reg}},
		"nil registerer":     {&fake{}, guard.Options{}},
		"negative threshold": {&fake{}, guard.Options{Registerer: reg, FailureThreshold: -1}},
		"negative cool-down": {&fake{}, guard.Options{Registerer: reg, CoolDown: -time.Second}},
	} {
		if _, err := guard.New(c.inner, c.opts); !errors.Is(err, guard.ErrInvalidOptions) {
			t.Errorf("%s: error = %v, want ErrInvalidOptions", name, err)
		}
	}
	if _, err := guard.New(&fake{}, guard.Options{Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	if _, err := guard.New(&fake{}, guard.Options{Registerer: reg}); !errors.Is(err, guard.ErrInvalidOptions) {
		t.Errorf("second guard on one registry: error = %v, want ErrInvalidOptions", err)
	}
}

// TestOpensAndFailsFast: N failures in a row open the circuit; then every
// method answers ErrUnavailable without calling the inner store.
func TestOpensAndFailsFast(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.fail(t, 2)
	if f.circuitOpen() != 0 {
		t.Fatal("circuit open after 2 failures, threshold 3")
	}
	f.fail(t, 1)
	if f.circuitOpen() != 1 || f.errorsTotal() != 3 {
		t.Fatalf("circuit_open = %v, errors_total = %v; want 1 and 3", f.circuitOpen(), f.errorsTotal())
	}
	f.inner.set(nil) // even a healthy store is not asked during the cool-down
	f.clock.Advance(time.Second - time.Nanosecond)
	for _, c := range calls {
		err := c.do(context.Background(), f.store)
		if !errors.Is(err, idempotency.ErrUnavailable) {
			t.Errorf("%s while open: error = %v, want ErrUnavailable", c.name, err)
		}
	}
	if n := f.inner.count(); n != 3 {
		t.Fatalf("inner store called %d times, want 3 (none while open)", n)
	}
	if f.errorsTotal() != 3 {
		t.Fatalf("errors_total = %v, want 3: refused calls are not backend errors", f.errorsTotal())
	}
}

// TestProbeAfterCoolDownRecovers: after the cool-down one call reaches the
// inner store; its success closes the circuit and calls flow again.
func TestProbeAfterCoolDownRecovers(t *testing.T) {
	t.Parallel()
	for _, probe := range calls {
		t.Run(probe.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.fail(t, 3)
			f.inner.set(nil)
			f.clock.Advance(time.Second)
			if err := probe.do(context.Background(), f.store); err != nil {
				t.Fatalf("probe: %v", err)
			}
			if f.inner.count() != 4 || f.circuitOpen() != 0 {
				t.Fatalf("inner calls = %d, circuit_open = %v; want 4 and 0", f.inner.count(), f.circuitOpen())
			}
			for _, c := range calls {
				if err := c.do(context.Background(), f.store); err != nil {
					t.Fatalf("%s after recovery: %v", c.name, err)
				}
			}
		})
	}
}

// TestFailedProbeReopens: a probe that fails starts another cool-down.
func TestFailedProbeReopens(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.fail(t, 3)
	f.clock.Advance(time.Second)
	f.fail(t, 1) // the probe
	f.clock.Advance(time.Second - time.Nanosecond)
	f.inner.set(nil)
	if err := calls[0].do(context.Background(), f.store); !errors.Is(err, idempotency.ErrUnavailable) {
		t.Fatalf("Begin before the new cool-down ended: error = %v, want ErrUnavailable", err)
	}
	f.clock.Advance(time.Nanosecond)
	if err := calls[0].do(context.Background(), f.store); err != nil {
		t.Fatalf("Begin after the new cool-down: %v", err)
	}
	if f.inner.count() != 5 {
		t.Fatalf("inner calls = %d, want 5", f.inner.count())
	}
}

// TestTimeoutsCount: the store timeout (a deadline on the caller's context)
// is how a hung Redis shows; it must open the circuit.
func TestTimeoutsCount(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.inner.set(context.DeadlineExceeded)
	ctx, cancel := context.WithDeadline(context.Background(), t0)
	defer cancel()
	for range 3 {
		if err := calls[0].do(ctx, f.store); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("error = %v, want DeadlineExceeded", err)
		}
	}
	if f.circuitOpen() != 1 {
		t.Fatal("3 timeouts did not open the circuit")
	}
}

// TestNeutralOutcomesNeverOpen: domain errors, misuse and a caller that
// cancelled, however many, neither open the circuit nor count as errors;
// they also do not reset the failures in a row.
func TestNeutralOutcomesNeverOpen(t *testing.T) {
	t.Parallel()
	domain := []error{
		idempotency.ErrLeaseLost, idempotency.ErrInvalidKey, idempotency.ErrInvalidTTL,
		idempotency.ErrTooLarge, idempotency.ErrInvalidResponse, idempotency.ErrClosed,
	}
	for _, e := range domain {
		t.Run(e.Error(), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.inner.set(fmt.Errorf("redisstore: %w", e))
			assertNeutral(context.Background(), t, f, e)
		})
	}
	t.Run("caller cancelled", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		f.inner.set(context.Canceled)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		assertNeutral(ctx, t, f, context.Canceled)
	})
}

func assertNeutral(ctx context.Context, t *testing.T, f fixture, want error) {
	t.Helper()
	for i := range 10 {
		c := calls[i%len(calls)]
		if err := c.do(ctx, f.store); !errors.Is(err, want) {
			t.Fatalf("%s: error = %v, want %v", c.name, err, want)
		}
	}
	if f.circuitOpen() != 0 || f.errorsTotal() != 0 {
		t.Fatalf("circuit_open = %v, errors_total = %v after neutral outcomes; want 0, 0", f.circuitOpen(), f.errorsTotal())
	}
	neutralErr := f.inner.get()
	f.fail(t, 2)
	f.inner.set(neutralErr)
	if err := calls[0].do(ctx, f.store); !errors.Is(err, want) {
		t.Fatalf("neutral call between failures: %v", err)
	}
	f.fail(t, 1)
	if f.circuitOpen() != 1 {
		t.Fatal("a neutral outcome reset the failures in a row")
	}
}

// TestInvalidArgumentsWhileOpen: bad input is reported as such, not as
// ErrUnavailable, and does not take the probe slot.
func TestInvalidArgumentsWhileOpen(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.fail(t, 3)
	ctx := context.Background()
	if _, err := f.store.Begin(ctx, "acme", "", fp, ttls); !errors.Is(err, idempotency.ErrInvalidKey) {
		t.Errorf("Begin with empty key: %v, want ErrInvalidKey", err)
	}
	if err := f.store.Complete(ctx, lease, idempotency.Response{Status: 42}); !errors.Is(err, idempotency.ErrInvalidResponse) {
		t.Errorf("Complete with status 42: %v, want ErrInvalidResponse", err)
	}
	if err := f.store.Renew(ctx, idempotency.Lease{Key: "k", TTLs: ttls}); !errors.Is(err, idempotency.ErrLeaseLost) {
		t.Errorf("Renew without token: %v, want ErrLeaseLost", err)
	}
	f.clock.Advance(time.Second)
	f.inner.set(nil)
	if err := calls[3].do(ctx, f.store); err != nil {
		t.Fatalf("probe after invalid calls: %v", err)
	}
}

// TestPassesThroughWhileClosed: the guard is invisible to a healthy store.
func TestPassesThroughWhileClosed(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) idempotency.Store {
			c := testclock.New(t0)
			s, err := guard.New(memstore.New(memstore.Config{Now: c.Now, MaxBodyBytes: 256 << 10}),
				guard.Options{Registerer: prometheus.NewRegistry(), Now: c.Now})
			if err != nil {
				t.Fatal(err)
			}
			return clocked{s, c}
		},
		Expire: func(_ *testing.T, s idempotency.Store, _, _ string) {
			s.(clocked).clock.Advance(storetest.TTLs.Record + time.Millisecond)
		},
		MaxBodyBytes: 256 << 10,
	})
}

type clocked struct {
	*guard.Store
	clock *testclock.Clock
}
