package idempotency

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestMetricsShareARegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewMetrics(reg)
	if err != nil {
		t.Fatalf("second NewMetrics on one registry: %v", err)
	}
	a.Count(APIExtAuthz, EventAcquired)
	b.Count(APIExtAuthz, EventAcquired)
	if v := a.Value(APIExtAuthz, EventAcquired); v != 2 {
		t.Fatalf("acquired = %v, want 2 (both handles count into one collector)", v)
	}
	if _, err := NewMetrics(nil); err == nil {
		t.Fatal("NewMetrics(nil) succeeded")
	}
}
