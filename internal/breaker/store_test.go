package breaker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func TestStoreOptionsValidate(t *testing.T) {
	reg := prometheus.NewRegistry()
	for name, o := range map[string]StoreOptions{
		"no registerer":      {},
		"negative threshold": {Registerer: reg, FailureThreshold: -1},
		"negative cool-down": {Registerer: reg, CoolDown: -time.Second},
	} {
		if err := o.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if err := (StoreOptions{Registerer: reg}).Validate(); err != nil {
		t.Errorf("zero options with a registerer: %v", err)
	}
	if _, err := NewStoreGuard(StoreOptions{Registerer: reg}, StoreHooks{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("no Open gauge: %v, want ErrInvalid", err)
	}
}

// TestStoreGuardDefaultsAndHooks: zero options open after DefaultThreshold
// failures and stay open for DefaultCoolDown on the injected clock; the
// gauge, the counter and both callbacks follow; neutral errors count for
// nothing.
func TestStoreGuardDefaultsAndHooks(t *testing.T) {
	now := time.Unix(1000, 0)
	open := prometheus.NewGauge(prometheus.GaugeOpts{Name: "open"})
	errs := prometheus.NewCounter(prometheus.CounterOpts{Name: "errors"})
	neutralErr := errors.New("bad input")
	var changes, failures int
	g, err := NewStoreGuard(StoreOptions{
		Registerer: prometheus.NewRegistry(),
		Now:        func() time.Time { return now },
		OnChange:   func(string, bool, error) { changes++ },
		OnError:    func(string, error) { failures++ },
	}, StoreHooks{
		Neutral: func(_ context.Context, err error) bool { return errors.Is(err, neutralErr) },
		Open:    open, Errors: errs,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	down := errors.New("connection refused")
	for range 3 {
		_ = g.Call(ctx, "", func() error { return neutralErr })
	}
	for i := range DefaultThreshold {
		if err := g.Call(ctx, "", func() error { return down }); !errors.Is(err, down) {
			t.Fatalf("failure %d: %v, want the backend's error", i+1, err)
		}
	}
	if err := g.Call(ctx, "", func() error { return nil }); !errors.Is(err, ErrOpen) {
		t.Fatalf("after %d failures: %v, want ErrOpen", DefaultThreshold, err)
	}
	if got := gaugeValue(t, open); got != 1 {
		t.Errorf("open gauge %v, want 1", got)
	}
	if got := counterValue(t, errs); got != DefaultThreshold {
		t.Errorf("errors counted %v, want %d (neutral errors are not)", got, DefaultThreshold)
	}
	if failures != DefaultThreshold || changes != 1 {
		t.Errorf("OnError %d times, OnChange %d times; want %d and 1", failures, changes, DefaultThreshold)
	}
	now = now.Add(DefaultCoolDown - time.Nanosecond)
	if err := g.Call(ctx, "", func() error { return nil }); !errors.Is(err, ErrOpen) {
		t.Fatalf("before the cool-down ends: %v, want ErrOpen", err)
	}
	now = now.Add(time.Nanosecond)
	if err := g.Call(ctx, "", func() error { return nil }); err != nil {
		t.Fatalf("probe after the cool-down: %v", err)
	}
	if got := gaugeValue(t, open); got != 0 || changes != 2 {
		t.Errorf("after a good probe: open gauge %v, OnChange %d times; want 0 and 2", got, changes)
	}
}

func gaugeValue(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
