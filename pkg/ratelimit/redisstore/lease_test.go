package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// leasable are the algorithms an allotment may lease.
var leasable = []ratelimit.Algorithm{ratelimit.GCRA, ratelimit.FixedWindow, ratelimit.SlidingWindow}

// leaseReq is a lease of hits tokens of l on key by holder, which still
// holds held tokens of earlier leases.
func leaseReq(key string, l ratelimit.Limit, hits int64, holder string, held int64) ratelimit.Request {
	return ratelimit.Request{Key: key, Limits: []ratelimit.Limit{l}, Hits: hits,
		Lease: ratelimit.Lease{Holder: holder, Held: held}}
}

// remaining is what a check of l on key finds left.
func remaining(t *testing.T, s *Store, key string, l ratelimit.Limit) int64 {
	t.Helper()
	res, err := s.Allow(context.Background(), key, l, 0)
	if err != nil {
		t.Fatal(err)
	}
	return res.Remaining
}

// TestResetKeepsLeasedTokensCharged: a reset forgets the hits decided on
// the store, and keeps charged what the leases' holders reported they may
// still use (held + the lease), for every leasable algorithm, the lease
// decided exactly as the same hits without a lease; a second reset keeps
// them too, and once they lapse a reset forgets them.
func TestResetKeepsLeasedTokensCharged(t *testing.T) {
	t.Parallel()
	_, c := standalone(t)
	ctx := context.Background()
	for _, alg := range leasable {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			s, clk := fixedStore(t, c)
			l := limitFor(alg, 100, time.Minute)
			key := randomKey(t)
			reqs := []ratelimit.Request{
				{Key: key, Limits: []ratelimit.Limit{l}, Hits: 20}, // decided on the store: forgotten
				leaseReq(key, l, 10, "a:1", 0),
				leaseReq(key, l, 8, "a:1", 4), // a:1 used 6 of its 10: holds 4 + 8
				leaseReq(key, l, 5, "b:1", 0),
			}
			for i, r := range reqs {
				d, err := s.AllowBatch(ctx, []ratelimit.Request{r})
				if err != nil || !d[0].Allowed {
					t.Fatalf("request %d: %+v, %v", i, d, err)
				}
			}
			if got, want := remaining(t, s, key, l), int64(100-20-10-8-5); got != want {
				t.Fatalf("before the reset %d remain, want %d: a lease charges what the same hits charge", got, want)
			}
			whole := []ratelimit.Request{{Key: key, Limits: []ratelimit.Limit{l}}}
			for range 2 {
				if err := s.Reset(ctx, whole); err != nil {
					t.Fatal(err)
				}
				if got, want := remaining(t, s, key, l), int64(100-(4+8)-5); got != want {
					t.Fatalf("after a reset %d remain, want %d: the holders' 17 tokens kept charged", got, want)
				}
			}
			clk.now += time.Minute.Microseconds() // every token lapsed: the window ended, the slots passed
			if err := s.Reset(ctx, whole); err != nil {
				t.Fatal(err)
			}
			if got := remaining(t, s, key, l); got != 100 {
				t.Fatalf("a reset after the tokens lapsed left %d, want 100", got)
			}
		})
	}
}

// TestLeaseRecordsOnlyCharges: a refused lease and a check record nothing
// for their holder; the ledger shares the state's hash tag and expires.
func TestLeaseRecordsOnlyCharges(t *testing.T) {
	t.Parallel()
	_, c := standalone(t)
	ctx := context.Background()
	s := newStore(t, c)
	l := limitFor(ratelimit.FixedWindow, 10, time.Hour)
	key := randomKey(t)
	for _, r := range []ratelimit.Request{leaseReq(key, l, 11, "a:1", 0), leaseReq(key, l, 0, "b:1", 0)} {
		if _, err := s.AllowBatch(ctx, []ratelimit.Request{r}); err != nil {
			t.Fatal(err)
		}
	}
	ledger := ledgerKey(s.StateKeys(ratelimit.Request{Key: key, Limits: []ratelimit.Limit{l}})[0])
	if n, err := c.Exists(ctx, ledger).Result(); err != nil || n != 0 {
		t.Fatalf("a refused lease and a check left a ledger (%d, %v)", n, err)
	}
	if _, err := s.AllowBatch(ctx, []ratelimit.Request{leaseReq(key, l, 3, "a:1", 0)}); err != nil {
		t.Fatal(err)
	}
	got, err := c.HGetAll(ctx, ledger).Result()
	if err != nil || len(got) != 1 || got["a:1"] == "" {
		t.Fatalf("ledger after one lease: %v, %v", got, err)
	}
	assertAllKeysHaveTTL(t, c)
}

// TestLedgerDropsLapsedHolders: a hot key's ledger keeps the holders whose
// tokens may still be used, and drops lapsed ones once it has many.
func TestLedgerDropsLapsedHolders(t *testing.T) {
	t.Parallel()
	_, c := standalone(t)
	ctx := context.Background()
	s, clk := fixedStore(t, c)
	l := limitFor(ratelimit.FixedWindow, 1000, time.Minute)
	key := randomKey(t)
	for i := range 70 {
		if _, err := s.AllowBatch(ctx, []ratelimit.Request{leaseReq(key, l, 1, fmt.Sprintf("old:%d", i), 0)}); err != nil {
			t.Fatal(err)
		}
	}
	clk.now += time.Minute.Microseconds()
	if _, err := s.AllowBatch(ctx, []ratelimit.Request{leaseReq(key, l, 1, "new:1", 0)}); err != nil {
		t.Fatal(err)
	}
	ledger := ledgerKey(s.StateKeys(ratelimit.Request{Key: key, Limits: []ratelimit.Limit{l}})[0])
	got, err := c.HGetAll(ctx, ledger).Result()
	if err != nil || len(got) != 1 || got["new:1"] == "" {
		t.Fatalf("ledger after the window: %d fields (%v), want only new:1", len(got), err)
	}
}

// TestLeaseRequestsAreChecked: a lease charges one limit and holds no
// negative count.
func TestLeaseRequestsAreChecked(t *testing.T) {
	t.Parallel()
	_, c := standalone(t)
	s := newStore(t, c)
	l := limitFor(ratelimit.GCRA, 10, time.Minute)
	two := leaseReq("k", l, 1, "a:1", 0)
	two.Limits = append(two.Limits, limitFor(ratelimit.FixedWindow, 10, time.Hour))
	for _, c := range []struct {
		r    ratelimit.Request
		want error
	}{{two, ratelimit.ErrInvalidLimit}, {leaseReq("k", l, 1, "a:1", -1), ratelimit.ErrInvalidHits}} {
		if _, err := s.AllowBatch(context.Background(), []ratelimit.Request{c.r}); !errors.Is(err, c.want) {
			t.Errorf("AllowBatch(%+v) = %v, want %v", c.r, err, c.want)
		}
	}
}

// A lease is charged only if admitted: a lease request in another charge
// mode is refused (ErrInvalidHits), and lease.lua itself, sent a charge
// mode after the limit's arguments, refuses instead of reading it as the
// holder.
func TestLeaseRefusesChargeModes(t *testing.T) {
	t.Parallel()
	_, c := standalone(t)
	s, _ := fixedStore(t, c)
	ctx := context.Background()
	l := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Requests: 10, Period: time.Minute}
	for _, m := range []ratelimit.ChargeMode{ratelimit.ChargeNever, ratelimit.ChargeAlways, ratelimit.ChargeReserve} {
		req := ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{l}, Hits: 3, Charge: m, Lease: ratelimit.Lease{Holder: "h"}}
		if _, err := s.AllowBatch(ctx, []ratelimit.Request{req}); !errors.Is(err, ratelimit.ErrInvalidHits) {
			t.Errorf("lease in mode %s: %v, want ErrInvalidHits", m, err)
		}
		args := append(scriptArgs(req, t0), req.Lease.Holder, req.Lease.Held)
		err := leaseScript.Run(ctx, c, []string{"{k}:s", "{k}:s:leases"}, args).Err()
		if err == nil || !strings.Contains(err.Error(), "a lease takes 8 arguments") {
			t.Errorf("lease.lua sent mode %s: %v, want its refusal", m, err)
		}
	}
	if n, _ := c.DBSize(ctx).Result(); n != 0 {
		t.Errorf("%d keys written by refused leases", n)
	}
}
