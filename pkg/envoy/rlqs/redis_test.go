package rlqs

import (
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/ratelimit/quota"
	"github.com/extauthz/extauthz/pkg/ratelimit/quota/quotaredis"
)

// Two replicas on one Redis are one allocator: an Envoy on each splits the
// budget. The first is pushed its half by its own replica's tick after the
// second reported to the other replica, and only then, the first's grant
// having shrunk in Redis, does the second get its half: never both halves
// on top of the whole.
func TestTwoReplicasShareRedis(t *testing.T) {
	t.Parallel()
	client := redistest.Standalone(t).Client()
	var replicas []*harness
	for range 2 {
		store, err := quotaredis.New(client, quotaredis.Options{Prefix: "t"})
		if err != nil {
			t.Fatal(err)
		}
		replicas = append(replicas, newHarness(t, Options{Tick: 10 * time.Millisecond}, store))
	}
	a, b := replicas[0].open(t), replicas[1].open(t)
	send(t, a, "quota", usage(acme, 1, 0))
	recvUntil(t, a, tokens{600, time.Minute, 10})
	send(t, b, "quota", usage(acme, 1, 0))
	replicas[0].clock.Add(time.Second) // a's replica re-reads once its cached allocation is a tick old
	recvUntil(t, a, tokens{300, time.Minute, 5})
	recvUntil(t, b, tokens{300, time.Minute, 5})
}

// The reconnect of TestReconnectNeverOverGrants across two replicas on one
// Redis, as when the replica holding an Envoy's stream restarts: the new
// stream, on the other replica, is capped by the grants recorded in Redis,
// the old stream's included, so the fleet never holds more than the budget.
func TestReconnectToAnotherReplicaNeverOverGrants(t *testing.T) {
	t.Parallel()
	client := redistest.Standalone(t).Client()
	f := newFleet()
	var replicas []*harness
	for range 2 {
		store, err := quotaredis.New(client, quotaredis.Options{Prefix: "t"})
		if err != nil {
			t.Fatal(err)
		}
		replicas = append(replicas, newHarness(t, Options{Tick: 100 * time.Millisecond}, store, f.interceptor()))
	}
	a, cancelA := replicas[0].openAs(t, "A", 1)
	b, _ := replicas[1].openAs(t, "B", 1)
	send(t, a, "quota", usage(acme, 1, 0))
	waitFor(t, f, "A's first assignment", func(r map[string]float64, _ map[string]string) bool { return r["A"] > 0 })
	send(t, b, "quota", usage(acme, 1, 0))
	replicas[0].clock.Add(time.Second) // A's replica re-reads the allocation B's report changed
	waitFor(t, f, "the split", func(r map[string]float64, _ map[string]string) bool { return r["A"] == 5 && r["B"] == 5 })
	// Both measured at about 1/s: each keeps its demand plus half the spare.
	for _, h := range replicas {
		h.clock.Add(quota.ReportInterval)
	}
	send(t, a, "", usage(acme, 5, 0))
	send(t, b, "", usage(acme, 5, 0))
	time.Sleep(300 * time.Millisecond)
	for _, h := range replicas { // each replica re-reads what the other's report changed
		h.clock.Add(time.Second)
	}
	waitFor(t, f, "the split of measured demands", func(r map[string]float64, _ map[string]string) bool {
		return r["A"] > 4.5 && r["B"] > 4.5
	})

	f.resetMax()
	cancelA()
	a2, _ := replicas[1].openAs(t, "A", 2)
	send(t, a2, "quota", usage(acme, 2, 0))
	waitFor(t, f, "A's first assignment on the other replica", func(_ map[string]float64, from map[string]string) bool {
		return from["A"] == "2"
	})
	time.Sleep(500 * time.Millisecond)
	rates, _, total := f.snapshot()
	t.Logf("after the reconnect: %v, max total %.3f", rates, total)
	if overBudget(total) {
		t.Errorf("across A's move to the other replica the fleet held up to %.3f/s, over the limit of 10/s (now %v)", total, rates)
	}
}
