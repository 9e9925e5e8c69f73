package failover_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/failover"
)

func downStore(t *testing.T, mode failover.Mode) ratelimit.Store {
	t.Helper()
	clk := &fakeClock{t: time.Unix(1_700_006_400, 0)}
	s, err := failover.New(&flaky{down: true}, failover.Options{
		Mode: mode, Fallback: newMem(t, clk.now), Registerer: prometheus.NewRegistry(), Now: clk.now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func charge(t *testing.T, s ratelimit.Store, hits int64, m ratelimit.ChargeMode) ratelimit.Decision {
	t.Helper()
	l := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Requests: 5, Period: time.Minute}
	d, err := s.AllowBatch(context.Background(), []ratelimit.Request{{Key: "k", Limits: []ratelimit.Limit{l}, Hits: hits, Charge: m}})
	if err != nil {
		t.Fatalf("%s %d: %v", m, hits, err)
	}
	return d[0]
}

// With the primary down, the fallback decides under the request's mode:
// checks charge nothing, forced charges land over the limit, refunds give back.
func TestFallbackAppliesChargeModes(t *testing.T) {
	t.Parallel()
	s := downStore(t, failover.Open)
	for range 3 {
		charge(t, s, 4, ratelimit.ChargeNever)
	}
	if d := charge(t, s, 7, ratelimit.ChargeAlways); d.Allowed || d.Results[0].Remaining != 0 {
		t.Fatalf("7 charged to a fresh budget of 5: %+v, want over", d)
	}
	if d := charge(t, s, 1, ratelimit.ChargeNever); d.Allowed {
		t.Fatalf("check after an overcharge admitted: %+v", d)
	}
	if d := charge(t, s, -4, ratelimit.ChargeAlways); !d.Allowed || d.Results[0].Remaining != 2 {
		t.Fatalf("refund of 4 from 7: %+v, want 2 remaining", d)
	}
}

// Fail-closed denies a refund like any request: a decision, not an error.
func TestClosedModeDecidesRefunds(t *testing.T) {
	t.Parallel()
	s := downStore(t, failover.Closed)
	if d := charge(t, s, -3, ratelimit.ChargeAlways); d.Allowed {
		t.Errorf("fail-closed with the primary down admitted: %+v", d)
	}
}

// With the primary down, a reservation (ChargeReserve) is taken with its
// check on the fallback as on the primary: admitted while one hit is
// left, charged whole, then refused without a charge; fail-closed refuses
// it.
func TestFallbackTakesReservationsAtomically(t *testing.T) {
	t.Parallel()
	s := downStore(t, failover.Open)
	for i, want := range []bool{true, true, false} { // 3, then 6 of 5 (one hit was left), then refused
		if d := charge(t, s, 3, ratelimit.ChargeReserve); d.Allowed != want {
			t.Fatalf("reservation %d: %+v, want allowed %v", i+1, d, want)
		}
	}
	if d := charge(t, s, -5, ratelimit.ChargeAlways); d.Results[0].Remaining != 4 {
		t.Fatalf("refund of 5 from 6: %+v, want 4 remaining (the refused reservation charged nothing)", d)
	}
	if d := charge(t, downStore(t, failover.Closed), 3, ratelimit.ChargeReserve); d.Allowed {
		t.Errorf("fail-closed admitted a reservation: %+v", d)
	}
}
