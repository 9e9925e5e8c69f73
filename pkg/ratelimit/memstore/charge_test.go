package memstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// remaining reads each limit's Remaining with a check (Hits 0).
func remaining(t *testing.T, s *Store, key string, ls []ratelimit.Limit) []int64 {
	t.Helper()
	d, err := s.AllowBatch(context.Background(), []ratelimit.Request{{Key: key, Limits: ls}})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int64, len(ls))
	for i, r := range d[0].Results {
		out[i] = r.Remaining
	}
	return out
}

// A ChargeAlways charges every limit of the request even when one of them
// is over; a ChargeNever charges none even when all admit.
func TestBatchChargeModes(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t, Options{})
	ctx := context.Background()
	ls := []ratelimit.Limit{limit(ratelimit.FixedWindow, 5, time.Minute), limit(ratelimit.GCRA, 100, time.Hour)}
	const key = "k"
	for _, c := range []struct {
		mode ratelimit.ChargeMode
		hits int64
		ok   bool
		want []int64
	}{
		{ratelimit.ChargeNever, 3, true, []int64{5, 100}},
		{ratelimit.ChargeAlways, 4, true, []int64{1, 96}},
		{ratelimit.ChargeAlways, 4, false, []int64{0, 92}}, // 8 on the first: over, yet both charged
		{ratelimit.ChargeNever, 1, false, []int64{0, 92}},
		{ratelimit.ChargeIfAdmitted, 1, false, []int64{0, 92}},
		{ratelimit.ChargeAlways, -4, true, []int64{1, 96}}, // back to 4 and 4
		{ratelimit.ChargeAlways, -40, true, []int64{5, 100}},
	} {
		d, err := s.AllowBatch(ctx, []ratelimit.Request{{Key: key, Limits: ls, Hits: c.hits, Charge: c.mode}})
		if err != nil {
			t.Fatalf("%s %d: %v", c.mode, c.hits, err)
		}
		if got := remaining(t, s, key, ls); d[0].Allowed != c.ok || got[0] != c.want[0] || got[1] != c.want[1] {
			t.Errorf("%s %d: allowed %v, then remaining %v; want %v, %v", c.mode, c.hits, d[0].Allowed, got, c.ok, c.want)
		}
	}
}

// A refund of a key the store does not hold stores nothing.
func TestRefundOfNothingStoresNothing(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t, Options{})
	l := limit(ratelimit.FixedWindow, 5, time.Minute)
	_, err := s.AllowBatch(context.Background(), []ratelimit.Request{{Key: "k", Limits: []ratelimit.Limit{l}, Hits: -3, Charge: ratelimit.ChargeAlways}})
	if err != nil || s.Stats().States != 0 {
		t.Errorf("refund of an empty key: err %v, %d states stored; want none", err, s.Stats().States)
	}
}

func TestBatchRejectsRefundsOutsideChargeAlways(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t, Options{})
	l := limit(ratelimit.FixedWindow, 5, time.Minute)
	for _, m := range []ratelimit.ChargeMode{ratelimit.ChargeIfAdmitted, ratelimit.ChargeNever} {
		_, err := s.AllowBatch(context.Background(), []ratelimit.Request{{Key: "k", Limits: []ratelimit.Limit{l}, Hits: -1, Charge: m}})
		if !errors.Is(err, ratelimit.ErrInvalidHits) {
			t.Errorf("%s with -1 hits: %v, want ErrInvalidHits", m, err)
		}
	}
}

// A ChargeReserve admits on one hit of every limit and then charges its
// whole hits to all of them, over the limit if need be; a refusal charges
// none and answers with the one-hit checks.
func TestBatchChargeReserve(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t, Options{})
	ctx := context.Background()
	ls := []ratelimit.Limit{limit(ratelimit.FixedWindow, 5, time.Minute), limit(ratelimit.GCRA, 100, time.Hour)}
	const key = "k"
	for _, c := range []struct {
		hits int64
		ok   bool
		want []int64
	}{
		{4, true, []int64{1, 96}},
		{4, true, []int64{0, 92}}, // one hit left on the first: admitted, 8 charged
		{1, false, []int64{0, 92}},
		{0, false, []int64{0, 92}},
	} {
		d, err := s.AllowBatch(ctx, []ratelimit.Request{{Key: key, Limits: ls, Hits: c.hits, Charge: ratelimit.ChargeReserve}})
		if err != nil {
			t.Fatalf("reserve %d: %v", c.hits, err)
		}
		if got := remaining(t, s, key, ls); d[0].Allowed != c.ok || got[0] != c.want[0] || got[1] != c.want[1] {
			t.Errorf("reserve %d: allowed %v, then remaining %v; want %v, %v", c.hits, d[0].Allowed, got, c.ok, c.want)
		}
		if !c.ok && (d[0].Results[1].Remaining != 91 || d[0].Results[0].Allowed) {
			t.Errorf("refused reserve %d: results %+v, want the one-hit checks (91 left after one on the second)", c.hits, d[0].Results)
		}
	}
}
