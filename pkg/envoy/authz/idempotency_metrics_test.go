package authz

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/idempotency"
)

func TestIdempotencyMetricsShareARegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := NewIdempotencyMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewIdempotencyMetrics(reg)
	if err != nil {
		t.Fatalf("second NewMetrics on one registry: %v", err)
	}
	a.Count(envoy.APIExtAuthz, "orders", idempotency.EventAcquired)
	b.Count(envoy.APIExtAuthz, "orders", idempotency.EventAcquired)
	if v := a.Value(envoy.APIExtAuthz, idempotency.EventAcquired); v != 2 {
		t.Fatalf("acquired = %v, want 2 (both handles count into one collector)", v)
	}
	if _, err := NewIdempotencyMetrics(nil); err == nil {
		t.Fatal("NewIdempotencyMetrics(nil) succeeded")
	}
}
