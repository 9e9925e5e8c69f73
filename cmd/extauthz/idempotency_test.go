package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/internal/redisclient"
	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/idempotency/guard"
)

// TestRedisIdempotencyStoreIsGuarded: with Redis configured the idempotency
// store is behind the circuit breaker, so a hung Redis (paused: calls time
// out) makes it fail fast with ErrUnavailable after guard's default
// threshold, and the breaker's metrics are on the process registry.
func TestRedisIdempotencyStoreIsGuarded(t *testing.T) {
	srv := redistest.Standalone(t)
	reg := prometheus.NewRegistry()
	// The client as production builds it: it honours the callers' deadlines
	// and does not retry, so each hung call ends at its 100 ms.
	client, err := redisclient.New(redisclient.Options{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	rb := &redisBacked{client: client, events: newRedisEvents(log, false)}
	deps, err := newIdempotency(Config{KeyPrefix: "xa"}, rb, reg, log)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := deps.store.(*guard.Store); !ok {
		t.Fatalf("Redis idempotency store is %T, want *guard.Store", deps.store)
	}
	ttls := idempotency.TTLs{Lease: 30 * time.Second, Record: time.Hour}
	fp := idempotency.NewFingerprint("POST", "/orders", nil, nil)
	begin := func(key string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err := deps.store.Begin(ctx, "acme", key, fp, ttls)
		return err
	}
	if err := begin("before"); err != nil {
		t.Fatalf("Begin with Redis up: %v", err)
	}

	srv.Pause()
	defer srv.Resume()
	for i := range guard.DefaultFailureThreshold {
		if err := begin("hung"); err == nil || errors.Is(err, idempotency.ErrUnavailable) {
			t.Fatalf("Begin %d with Redis hung: error = %v, want a backend failure", i+1, err)
		}
	}
	if err := begin("hung"); !errors.Is(err, idempotency.ErrUnavailable) {
		t.Fatalf("Begin after %d failures: error = %v, want ErrUnavailable", guard.DefaultFailureThreshold, err)
	}
	for name, want := range map[string]int{
		"extauthz_idempotency_store_circuit_open": 1,
		"extauthz_idempotency_store_errors_total": guard.DefaultFailureThreshold,
	} {
		if got := gatheredValue(t, reg, name); got != float64(want) {
			t.Errorf("%s = %v, want %d", name, got, want)
		}
	}
}

func gatheredValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			return m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	t.Fatalf("%s not gathered", name)
	return 0
}
