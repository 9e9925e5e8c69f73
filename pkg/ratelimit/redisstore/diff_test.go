package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// reference decides requests with package ratelimit's pure algorithms, the
// way the memory store does: every limit against its state, charged as the
// request's mode says (by default all only when all admit and hits > 0).
type reference struct{ states map[string]ratelimit.State }

func (r *reference) decide(t *testing.T, req ratelimit.Request, now int64) ratelimit.Decision {
	t.Helper()
	d := ratelimit.Decision{Allowed: true, Results: make([]ratelimit.Result, len(req.Limits))}
	next := make([]ratelimit.State, len(req.Limits))
	for i, l := range req.Limits {
		res, st, err := ratelimit.DecideCharge(l, now, r.states[stateID(req.Key, l)], req.Hits, req.Charge)
		if err != nil {
			t.Fatalf("Decide: %v", err)
		}
		d.Results[i], next[i] = res, st
		d.Allowed = d.Allowed && res.Allowed
	}
	if req.Charge == ratelimit.ChargeReserve && !d.Allowed { // refused: the one-hit checks answer
		for i, l := range req.Limits {
			d.Results[i], _, _ = ratelimit.DecideCharge(l, now, r.states[stateID(req.Key, l)], 1, ratelimit.ChargeNever)
		}
	}
	charged := req.Charge == ratelimit.ChargeAlways || req.Charge != ratelimit.ChargeNever && d.Allowed
	if charged && req.Hits != 0 {
		for i, l := range req.Limits {
			r.states[stateID(req.Key, l)] = next[i]
		}
	}
	return d
}

func stateID(key string, l ratelimit.Limit) string {
	return fmt.Sprintf("%s|%s|%d", key, l.Algorithm.OrDefault(), l.Period)
}

// TestScriptMatchesGoAlgorithms plays random sequences of calls at fixed
// instants through the Lua script and through ratelimit.Decide, and requires
// identical Decisions at every step: same admissions, remaining, reset and
// retry to the microsecond.
func TestScriptMatchesGoAlgorithms(t *testing.T) {
	t.Parallel()
	_, c := standalone(t)
	for seed := uint64(1); seed <= 24; seed++ {
		for _, alg := range ratelimit.Algorithms() {
			t.Run(fmt.Sprintf("%s/seed%d", alg, seed), func(t *testing.T) {
				s, clk := fixedStore(t, c)
				rng := rand.New(rand.NewPCG(seed, uint64(len(alg))))
				playRandom(t, s, clk, rng, []ratelimit.Limit{randomLimit(rng, alg)})
			})
		}
	}
}

// TestScriptMatchesGoTwoLimits does the same with two limits of one
// algorithm, the requests that run a single-algorithm script (one limit of
// gcra or fixed_window runs single.lua instead).
func TestScriptMatchesGoTwoLimits(t *testing.T) {
	t.Parallel()
	_, c := standalone(t)
	for seed := uint64(1); seed <= 12; seed++ {
		for _, alg := range ratelimit.Algorithms() {
			t.Run(fmt.Sprintf("%s/seed%d", alg, seed), func(t *testing.T) {
				s, clk := fixedStore(t, c)
				rng := rand.New(rand.NewPCG(seed, 7+uint64(len(alg))))
				second := randomLimit(rng, alg)
				second.Period += time.Millisecond // a distinct state key
				playRandom(t, s, clk, rng, []ratelimit.Limit{randomLimit(rng, alg), second})
			})
		}
	}
}

// TestScriptMatchesGoAllOrNone does the same with several limits of mixed
// algorithms on one key, where a denial by one must leave the others
// uncharged.
func TestScriptMatchesGoAllOrNone(t *testing.T) {
	t.Parallel()
	_, c := standalone(t)
	for seed := uint64(1); seed <= 24; seed++ {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			s, clk := fixedStore(t, c)
			rng := rand.New(rand.NewPCG(seed, 99))
			var limits []ratelimit.Limit
			for i, alg := range ratelimit.Algorithms() {
				if rng.IntN(3) > 0 || i == 0 {
					l := randomLimit(rng, alg)
					l.Period += time.Duration(i) * time.Millisecond // distinct periods
					limits = append(limits, l)
				}
			}
			playRandom(t, s, clk, rng, limits)
		})
	}
}

// TestScriptMatchesGoChargeModes holds decide.lua's charge modes (checks,
// forced charges and refunds) to package ratelimit's, for one limit of each
// algorithm, two of one algorithm, and a mix of all four.
func TestScriptMatchesGoChargeModes(t *testing.T) {
	t.Parallel()
	_, c := standalone(t)
	for seed := uint64(1); seed <= 16; seed++ {
		for _, alg := range ratelimit.Algorithms() {
			t.Run(fmt.Sprintf("%s/seed%d", alg, seed), func(t *testing.T) {
				s, clk := fixedStore(t, c)
				rng := rand.New(rand.NewPCG(seed, 31+uint64(len(alg))))
				limits := []ratelimit.Limit{randomLimit(rng, alg)}
				if seed%2 == 0 {
					second := randomLimit(rng, alg)
					second.Period += time.Millisecond // a distinct state key
					limits = append(limits, second)
				}
				playCharged(t, s, clk, rng, limits)
			})
		}
		t.Run(fmt.Sprintf("mixed/seed%d", seed), func(t *testing.T) {
			s, clk := fixedStore(t, c)
			rng := rand.New(rand.NewPCG(seed, 131))
			var limits []ratelimit.Limit
			for i, alg := range ratelimit.Algorithms() {
				l := randomLimit(rng, alg)
				l.Period += time.Duration(i) * time.Millisecond
				limits = append(limits, l)
			}
			playCharged(t, s, clk, rng, limits)
		})
	}
}

// randomLimit picks small limits and periods so that sequences of a few
// hundred calls cross many windows and hit every branch.
func randomLimit(rng *rand.Rand, alg ratelimit.Algorithm) ratelimit.Limit {
	periods := []time.Duration{time.Second, 3 * time.Second, 7 * time.Second, time.Minute}
	l := ratelimit.Limit{
		Algorithm: alg,
		Requests:  1 + rng.Int64N(12),
		Period:    periods[rng.IntN(len(periods))],
	}
	if alg == ratelimit.GCRA && rng.IntN(2) == 0 {
		l.Burst = 1 + rng.Int64N(20)
	}
	return l
}

// playRandom sends 300 requests of 0..4 hits, moving the clock by 0 to ~2
// periods (mostly small steps, sometimes none, now and then backwards as a
// failed-over Redis's clock might) and compares every Decision.
func playRandom(t *testing.T, s *Store, clk *clock, rng *rand.Rand, limits []ratelimit.Limit) {
	t.Helper()
	play(t, s, clk, rng, limits, func(*rand.Rand) (int64, ratelimit.ChargeMode) {
		return rng.Int64N(5), ratelimit.ChargeIfAdmitted
	})
}

// playCharged is playRandom with every charge mode: checks of 0..4 hits,
// forced charges of -8..15 hits (refunds, and charges far over small
// limits), reservations of 0..15 hits (admitted on one, charged whole), and
// counted requests.
func playCharged(t *testing.T, s *Store, clk *clock, rng *rand.Rand, limits []ratelimit.Limit) {
	t.Helper()
	play(t, s, clk, rng, limits, func(rng *rand.Rand) (int64, ratelimit.ChargeMode) {
		switch rng.IntN(4) {
		case 0:
			return rng.Int64N(5), ratelimit.ChargeNever
		case 1:
			return rng.Int64N(24) - 8, ratelimit.ChargeAlways
		case 2:
			return rng.Int64N(16), ratelimit.ChargeReserve
		}
		return rng.Int64N(5), ratelimit.ChargeIfAdmitted
	})
}

// play sends 300 requests whose hits and mode pick chooses.
func play(t *testing.T, s *Store, clk *clock, rng *rand.Rand, limits []ratelimit.Limit,
	pick func(*rand.Rand) (int64, ratelimit.ChargeMode)) {
	t.Helper()
	ref := &reference{states: map[string]ratelimit.State{}}
	key := randomKey(t)
	p := limits[0].Period.Microseconds()
	clk.now = t0 + rng.Int64N(p)
	for i := 0; i < 300; i++ {
		switch r := rng.IntN(10); {
		case r < 3: // same instant
		case r < 8:
			clk.now += rng.Int64N(p / 4)
		case r < 9:
			clk.now += rng.Int64N(2 * p)
		default:
			clk.now -= rng.Int64N(p / 2)
		}
		hits, mode := pick(rng)
		req := ratelimit.Request{Key: key, Limits: limits, Hits: hits, Charge: mode}
		want := ref.decide(t, req, clk.now)
		got, err := s.AllowBatch(context.Background(), []ratelimit.Request{req})
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if !equalDecision(got[0], want) {
			t.Fatalf("step %d at t0%+dus, hits %d (%s), limits %+v:\n redis %+v\n    go %+v", i, clk.now-t0, req.Hits, req.Charge, limits, got[0], want)
		}
	}
}

func equalDecision(a, b ratelimit.Decision) bool {
	if a.Allowed != b.Allowed || len(a.Results) != len(b.Results) {
		return false
	}
	for i := range a.Results {
		if a.Results[i] != b.Results[i] {
			return false
		}
	}
	return true
}
