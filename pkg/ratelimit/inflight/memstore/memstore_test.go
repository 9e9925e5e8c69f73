package memstore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit/inflight"
	"github.com/extauthz/extauthz/pkg/ratelimit/inflight/inflighttest"
	"github.com/extauthz/extauthz/pkg/ratelimit/inflight/memstore"
)

// clock is an injected clock, safe for the suite's concurrent test.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// storeOn pairs a store with its clock, for Advance.
type storeOn struct {
	*memstore.Store
	clk *clock
}

func TestSuite(t *testing.T) {
	inflighttest.Run(t, inflighttest.Harness{
		New: func(*testing.T) inflight.Store {
			c := newClock()
			return storeOn{memstore.New(memstore.Config{Now: c.now}), c}
		},
		Advance: func(_ *testing.T, s inflight.Store, d time.Duration) { s.(storeOn).clk.advance(d) },
		TTL:     10 * time.Second,
	})
}

// A slot expires at its expiry instant, not a nanosecond later.
func TestExpiresAtInstant(t *testing.T) {
	c := newClock()
	s, ctx := memstore.New(memstore.Config{Now: c.now}), context.Background()
	slot, _, _ := s.Acquire(ctx, "k", 1, time.Second)
	c.advance(time.Second - 1)
	if _, r, _ := s.Acquire(ctx, "k", 1, time.Second); r.Acquired || r.RetryAfter != 1 {
		t.Fatalf("1ns before expiry: %+v", r)
	}
	c.advance(1)
	if ok, _ := s.Release(ctx, "k", slot); ok {
		t.Fatal("released a slot at its expiry instant")
	}
}

// The sweep drops keys whose slots all expired, even if never touched again.
func TestSweepBoundsMemory(t *testing.T) {
	c := newClock()
	s, ctx := memstore.New(memstore.Config{Now: c.now, SweepEvery: time.Minute}), context.Background()
	for _, k := range []string{"a", "b", "c"} {
		if _, _, err := s.Acquire(ctx, k, 1, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	c.advance(time.Minute)
	if _, _, err := s.Acquire(ctx, "d", 1, time.Second); err != nil {
		t.Fatal(err)
	}
	if n := s.Keys(); n != 1 {
		t.Fatalf("%d keys after the sweep, want 1", n)
	}
}

// MaxKeys refuses a new key rather than evicting a live slot, and admits
// again once slots expire.
func TestMaxKeys(t *testing.T) {
	c := newClock()
	s, ctx := memstore.New(memstore.Config{Now: c.now, MaxKeys: 2}), context.Background()
	for _, k := range []string{"a", "b"} {
		if _, _, err := s.Acquire(ctx, k, 1, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.Acquire(ctx, "c", 1, time.Second); !errors.Is(err, memstore.ErrFull) {
		t.Fatalf("third key: %v, want ErrFull", err)
	}
	if _, r, err := s.Acquire(ctx, "a", 2, time.Second); err != nil || !r.Acquired {
		t.Fatalf("existing key on a full store: %+v, %v", r, err)
	}
	c.advance(time.Second)
	if _, r, err := s.Acquire(ctx, "c", 1, time.Second); err != nil || !r.Acquired {
		t.Fatalf("after expiry: %+v, %v", r, err)
	}
}
