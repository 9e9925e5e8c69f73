package rlqs

import (
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestReportsAreTraced: each usage report is one server span, with the
// domain (or "_unknown"), the buckets reported and the assignments sent.
func TestReportsAreTraced(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	h := newHarness(t, Options{TracerProvider: tp}, nil)
	c := h.open(t)
	send(t, c, "quota", usage(acme, 1, 0), usage(acmeOrders, 1, 0))
	_ = recv(t, c)
	u := h.open(t)
	send(t, u, "nosuchdomain", usage(acme, 1, 0))
	_ = recv(t, u)
	want := map[string][2]int64{"quota": {2, 2}, "_unknown": {1, 1}}
	deadline := time.Now().Add(5 * time.Second)
	for len(rec.Ended()) < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	for _, s := range rec.Ended() {
		if s.Name() != SpanReport {
			t.Errorf("span %q, want %q", s.Name(), SpanReport)
			continue
		}
		got := map[string]any{}
		for _, kv := range s.Attributes() {
			got[string(kv.Key)] = kv.Value.AsInterface()
		}
		dom, _ := got[string(AttrDomain)].(string)
		w, ok := want[dom]
		if !ok || got[string(AttrBuckets)] != w[0] || got[string(AttrAssignments)] != w[1] {
			t.Errorf("span attributes %v; want domain in %v with its buckets and assignments", got, want)
		}
		delete(want, dom)
	}
	if len(want) != 0 {
		t.Errorf("no report span for %v", want)
	}
}
