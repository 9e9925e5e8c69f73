package overlimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

func decideOne(t *testing.T, s ratelimit.Store, l ratelimit.Limit, hits int64, m ratelimit.ChargeMode) ratelimit.Decision {
	t.Helper()
	d, err := s.AllowBatch(context.Background(), []ratelimit.Request{{Key: "k", Limits: []ratelimit.Limit{l}, Hits: hits, Charge: m}})
	if err != nil {
		t.Fatal(err)
	}
	return d[0]
}

// A remembered denial answers checks, never a forced charge: the charge
// reaches the store and lands, so the budget's debt is what was charged.
func TestChargeAlwaysIsNeverSwallowed(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{t: time.Unix(1_700_006_400, 0)}
	inner := newMem(t, clk)
	s, _ := newCached(t, inner, clk)
	l := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Requests: 5, Period: time.Minute}
	decideOne(t, s, l, 6, ratelimit.ChargeAlways)
	if d := decideOne(t, s, l, 1, ratelimit.ChargeNever); d.Allowed {
		t.Fatalf("check of a spent budget admitted: %+v", d)
	}
	before := inner.reqs.Load()
	if d := decideOne(t, s, l, 1, ratelimit.ChargeNever); d.Allowed || inner.reqs.Load() != before {
		t.Fatalf("second check: %+v, store asked %d times; want a remembered denial", d, inner.reqs.Load()-before)
	}
	decideOne(t, s, l, 4, ratelimit.ChargeAlways) // 10 counted
	if inner.reqs.Load() != before+1 {
		t.Fatalf("a forced charge did not reach the store")
	}
	if d := decideOne(t, inner, l, 0, ratelimit.ChargeNever); d.Results[0].Remaining != 0 {
		t.Fatalf("remaining %d after 10 of 5 charged", d.Results[0].Remaining)
	}
	decideOne(t, inner, l, -5, ratelimit.ChargeAlways) // back to 5: still spent if all 10 landed
	if d := decideOne(t, inner, l, 1, ratelimit.ChargeNever); d.Allowed {
		t.Errorf("after charging 10 and refunding 5 of a budget of 5, a check admitted: the charge of 4 was lost")
	}
}

// A refund through the cache forgets the denial it may have made wrong.
func TestRefundForgetsTheRememberedDenial(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{t: time.Unix(1_700_006_400, 0)}
	s, _ := newCached(t, newMem(t, clk), clk)
	l := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Requests: 5, Period: time.Minute}
	decideOne(t, s, l, 5, ratelimit.ChargeAlways)
	if d := decideOne(t, s, l, 1, ratelimit.ChargeNever); d.Allowed {
		t.Fatalf("check of a spent budget admitted: %+v", d)
	}
	decideOne(t, s, l, -2, ratelimit.ChargeAlways)
	if d := decideOne(t, s, l, 1, ratelimit.ChargeNever); !d.Allowed || d.Results[0].Remaining != 1 {
		t.Errorf("check after a refund of 2: %+v, want admitted with 1 remaining", d)
	}
}

// A refused reservation (ChargeReserve) is remembered as a denial of one
// hit: a later reservation of any size is refused without the store, and a
// refund forgets it.
func TestReservationRefusedAsOneHit(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{t: time.Unix(1_700_006_400, 0)}
	inner := newMem(t, clk)
	s, _ := newCached(t, inner, clk)
	l := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Requests: 5, Period: time.Minute}
	for i, want := range []bool{true, true, false} { // 3, then 6 (one hit was left), then refused
		if d := decideOne(t, s, l, 3, ratelimit.ChargeReserve); d.Allowed != want {
			t.Fatalf("reservation %d: %+v, want allowed %v", i+1, d, want)
		}
	}
	before := inner.reqs.Load()
	for _, hits := range []int64{1, 300} {
		if d := decideOne(t, s, l, hits, ratelimit.ChargeReserve); d.Allowed || inner.reqs.Load() != before {
			t.Fatalf("reservation of %d on a spent budget: %+v, store asked %d times; want a remembered denial", hits, d, inner.reqs.Load()-before)
		}
	}
	decideOne(t, s, l, -6, ratelimit.ChargeAlways)
	if d := decideOne(t, s, l, 3, ratelimit.ChargeReserve); !d.Allowed {
		t.Errorf("reservation after the refund: %+v, want admitted", d)
	}
}
