package allotment

import (
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// TestLocalDecisionAllocates: a decision from a slice allocates no more than
// the memory store's decision (the returned Decision and its Results), and
// an exact request through the wrapper no more than without it.
func TestLocalDecisionAllocates(t *testing.T) {
	g := newRig(t, nil, nil, Options{})
	al := allot(ratelimit.FixedWindow, 1_000_000_000, time.Hour)
	ex := ratelimit.Limit{Requests: 1_000_000_000, Period: time.Hour}
	local := []ratelimit.Request{{Key: "tenant|edge|route=orders", Limits: []ratelimit.Limit{al}, Hits: 1}}
	exact := []ratelimit.Request{{Key: "tenant|edge|route=orders", Limits: []ratelimit.Limit{ex}, Hits: 1}}
	g.warm(t, local[0].Key, al)
	mem := testing.AllocsPerRun(1000, func() { _, _ = g.mem.AllowBatch(g.ctx, exact) })
	g.rec.taken()
	got := testing.AllocsPerRun(1000, func() { _, _ = g.s.AllowBatch(g.ctx, local) })
	through := testing.AllocsPerRun(1000, func() { _, _ = g.s.AllowBatch(g.ctx, exact) })
	if got > mem {
		t.Errorf("a local decision allocates %v times, the memory store %v", got, mem)
	}
	if through > mem+1 { // +1: the recorder's log of the call
		t.Errorf("an exact request through the wrapper allocates %v times, the memory store %v", through, mem)
	}
}

// TestColdDecisionAllocates: a cold key's request (each one after more than
// the horizon of silence) allocates no more than the same request decided
// exact through the wrapper, and leaves no slice.
func TestColdDecisionAllocates(t *testing.T) {
	g := newRig(t, nil, nil, Options{})
	al := allot(ratelimit.FixedWindow, 1_000_000_000, time.Hour)
	cold := []ratelimit.Request{{Key: "tenant|edge|route=orders", Limits: []ratelimit.Limit{al}, Hits: 1}}
	exact := []ratelimit.Request{{Key: "tenant|edge|route=orders", Limits: []ratelimit.Limit{exactOf(al)}, Hits: 1}}
	quiet := DefaultHorizon + time.Microsecond
	through := testing.AllocsPerRun(1000, func() { g.clk.Add(quiet); _, _ = g.s.AllowBatch(g.ctx, exact) })
	g.rec.taken()
	got := testing.AllocsPerRun(1000, func() { g.clk.Add(quiet); _, _ = g.s.AllowBatch(g.ctx, cold) })
	t.Logf("allocations: cold %v, exact through the wrapper %v", got, through)
	if got > through {
		t.Errorf("a cold decision allocates %v times, an exact one through the wrapper %v", got, through)
	}
	if n := g.s.table.len(); n != 0 {
		t.Errorf("%d slices after cold decisions, want none", n)
	}
}
