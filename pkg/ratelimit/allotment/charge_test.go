package allotment

import (
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

func (g *rig) charge(t *testing.T, key string, hits int64, m ratelimit.ChargeMode, l ratelimit.Limit) ratelimit.Decision {
	t.Helper()
	d, err := g.s.AllowBatch(g.ctx, []ratelimit.Request{{Key: key, Limits: []ratelimit.Limit{l}, Hits: hits, Charge: m}})
	if err != nil {
		t.Fatal(err)
	}
	g.s.wg.Wait()
	return d[0]
}

// Checks (ChargeNever) and charges (ChargeAlways) of an allotment limit go
// to the shared store as they are: a check leases nothing, a charge lands
// exactly, over the limit too, and a refund gives back.
func TestChargeModesGoToTheSharedStore(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil, nil, Options{})
	for _, alg := range []ratelimit.Algorithm{ratelimit.GCRA, ratelimit.FixedWindow, ratelimit.SlidingWindow} {
		l := allot(alg, 100, time.Hour)
		key := "k-" + string(alg)
		for range 5 {
			if d := g.charge(t, key, 1, ratelimit.ChargeNever, l); !d.Allowed {
				t.Fatalf("%s: check of a fresh budget denied: %+v", alg, d)
			}
		}
		if got := g.shared(t, key, l).Remaining; got != 100 {
			t.Fatalf("%s: after 5 checks the shared store has %d of 100 left: a check leased or charged", alg, got)
		}
		for i, c := range []struct {
			hits   int64
			allow  bool
			shared int64
		}{{60, true, 40}, {60, false, 0}, {-30, true, 10}} {
			d := g.charge(t, key, c.hits, ratelimit.ChargeAlways, l)
			if sh := g.shared(t, key, l).Remaining; d.Allowed != c.allow || sh != c.shared {
				t.Errorf("%s charge %d (%d): allowed %v, shared remaining %d; want %v, %d", alg, i, c.hits, d.Allowed, sh, c.allow, c.shared)
			}
		}
	}
}

// A refund gives back on the shared store and forgets the denial a slice
// remembered for its key: the next request that fits is admitted, not
// refused from the memory of a count the refund lowered.
func TestRefundForgetsTheSlicesDenial(t *testing.T) {
	t.Parallel()
	g := newRig(t, nil, nil, Options{})
	for _, alg := range []ratelimit.Algorithm{ratelimit.GCRA, ratelimit.FixedWindow, ratelimit.SlidingWindow} {
		l := allot(alg, 10, time.Hour)
		key := "refund-" + string(alg)
		for i, hits := range []int64{1, 1, 8} { // two requests warm the key: a slice
			if d := g.charge(t, key, hits, ratelimit.ChargeIfAdmitted, l); !d.Allowed {
				t.Fatalf("%s charge %d (%d of 10): denied", alg, i, hits)
			}
		}
		for range 2 { // the second is answered from the slice's remembered denial
			if d := g.charge(t, key, 5, ratelimit.ChargeIfAdmitted, l); d.Allowed {
				t.Fatalf("%s: 5 more with 10 of 10 spent admitted", alg)
			}
		}
		if d := g.charge(t, key, -5, ratelimit.ChargeAlways, l); !d.Allowed {
			t.Errorf("%s: refund of 5: %+v, want within the limit", alg, d)
		}
		if d := g.charge(t, key, 5, ratelimit.ChargeIfAdmitted, l); !d.Allowed {
			t.Errorf("%s: 5 after a refund of 5 with 10 of 10 spent: denied, want admitted", alg)
		}
	}
}
