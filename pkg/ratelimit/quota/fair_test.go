package quota

import (
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"testing"
)

func TestShares(t *testing.T) {
	t.Parallel()
	nan, inf := math.NaN(), math.Inf(1)
	tests := []struct {
		name    string
		budget  float64
		demands map[string]float64
		spare   Spare
		want    map[string]float64
	}{
		{"no clients", 10, nil, SpareEqual, map[string]float64{}},
		{"small ones get their demand", 10, map[string]float64{"a": 2, "b": 3, "c": 100}, SpareNone,
			map[string]float64{"a": 2, "b": 3, "c": 5}},
		{"rest split among the big ones", 12, map[string]float64{"a": 1, "b": 100, "c": 50}, SpareNone,
			map[string]float64{"a": 1, "b": 5.5, "c": 5.5}},
		{"ties split equally", 12, map[string]float64{"a": 5, "b": 5, "c": 5}, SpareNone,
			map[string]float64{"a": 4, "b": 4, "c": 4}},
		{"thirds", 10, map[string]float64{"a": 5, "b": 5, "c": 5}, SpareNone,
			map[string]float64{"a": 10.0 / 3, "b": 10.0 / 3, "c": 10.0 / 3}},
		{"zero demand gets nothing without spare", 10, map[string]float64{"a": 0, "b": 20}, SpareNone,
			map[string]float64{"a": 0, "b": 10}},
		{"no spare when demand exceeds the budget", 10, map[string]float64{"a": 0, "b": 20}, SpareEqual,
			map[string]float64{"a": 0, "b": 10}},
		{"demands fit: SpareNone keeps the rest", 10, map[string]float64{"a": 1, "b": 3}, SpareNone,
			map[string]float64{"a": 1, "b": 3}},
		{"demands fit: SpareEqual splits the rest", 10, map[string]float64{"a": 1, "b": 3}, SpareEqual,
			map[string]float64{"a": 4, "b": 6}},
		{"all idle: SpareEqual is an equal split", 9, map[string]float64{"a": 0, "b": 0, "c": 0}, SpareEqual,
			map[string]float64{"a": 3, "b": 3, "c": 3}},
		{"exact fit", 10, map[string]float64{"a": 4, "b": 6}, SpareEqual,
			map[string]float64{"a": 4, "b": 6}},
		{"NaN and negative demands count as 0", 10, map[string]float64{"a": nan, "b": -5, "c": 50}, SpareNone,
			map[string]float64{"a": 0, "b": 0, "c": 10}},
		{"unknown demand wants a fair share", 10, map[string]float64{"a": Unknown, "b": inf, "c": 2}, SpareNone,
			map[string]float64{"a": 4, "b": 4, "c": 2}},
		{"one client above the budget", 10, map[string]float64{"a": 1e300}, SpareNone,
			map[string]float64{"a": 10}},
		{"zero budget", 0, map[string]float64{"a": 1, "b": 0}, SpareEqual,
			map[string]float64{"a": 0, "b": 0}},
		{"NaN budget", nan, map[string]float64{"a": 1}, SpareEqual, map[string]float64{"a": 0}},
		{"negative budget", -10, map[string]float64{"a": 1}, SpareEqual, map[string]float64{"a": 0}},
		{"infinite budget", inf, map[string]float64{"a": 1}, SpareEqual, map[string]float64{"a": 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := Shares(tc.budget, tc.demands, tc.spare)
			if len(got) != len(tc.want) {
				t.Fatalf("Shares = %v, want %v", got, tc.want)
			}
			for id, w := range tc.want {
				if g, ok := got[id]; !ok || g != w {
					t.Errorf("share of %q = %v, want %v (all: %v)", id, g, w, got)
				}
			}
			checkShares(t, tc.budget, tc.demands, tc.spare, got)
		})
	}
}

// TestSharesTiesBitIdentical: clients that all want more than their fair
// share get one value, not values that differ in the last bits.
func TestSharesTiesBitIdentical(t *testing.T) {
	t.Parallel()
	demands := map[string]float64{"a": 0.1, "b": 0.2}
	for i := range 7 {
		demands["big"+strconv.Itoa(i)] = 1e6
	}
	got := Shares(10, demands, SpareEqual)
	want := got["big0"]
	for i := range 7 {
		if g := got["big"+strconv.Itoa(i)]; g != want {
			t.Errorf("big%d = %v, big0 = %v: ties must be bit-identical", i, g, want)
		}
	}
	checkShares(t, 10, demands, SpareEqual, got)
}

func TestSharesManyClients(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	demands := make(map[string]float64, 50_000)
	for i := range 50_000 {
		demands["envoy-"+strconv.Itoa(i)] = rng.ExpFloat64() * 3
	}
	// Total demand is about 150 000: budgets below, near and above it.
	checkShares(t, 149_000, demands, SpareNone, Shares(149_000, demands, SpareNone))
	checkShares(t, 1e9, demands, SpareEqual, Shares(1e9, demands, SpareEqual))
	checkShares(t, 1000, demands, SpareEqual, Shares(1000, demands, SpareEqual))
}

// checkShares asserts the invariants of Shares (see its doc):
//   - one share per client, finite and >= 0;
//   - the sum in client-ID order is at most the (clean) budget;
//   - SpareNone: no client gets more than its (clean) demand;
//   - demands that fit are met; otherwise the whole budget is used
//     (SpareEqual also uses the whole budget when they fit);
//   - max-min: a client that gets less than its demand gets at least as much
//     as any other client;
//   - deterministic: the same inputs in a fresh map give the same bits.
func checkShares(t *testing.T, budget float64, demands map[string]float64, spare Spare, got map[string]float64) {
	t.Helper()
	const rel = 1e-9
	b := cleanBudget(budget)
	if len(got) != len(demands) {
		t.Fatalf("%d shares for %d clients", len(got), len(demands))
	}
	ids := make([]string, 0, len(got))
	var totalDemand, maxShare float64
	for id, d := range demands {
		ids = append(ids, id)
		s, ok := got[id]
		if !ok || math.IsNaN(s) || math.IsInf(s, 0) || s < 0 {
			t.Fatalf("share of %q = %v (present %v)", id, s, ok)
		}
		if spare == SpareNone && s > cleanDemand(d, b) {
			t.Errorf("share of %q = %v above its demand %v", id, s, cleanDemand(d, b))
		}
		totalDemand += cleanDemand(d, b)
		maxShare = max(maxShare, s)
	}
	sort.Strings(ids)
	var sum float64
	for _, id := range ids {
		sum += got[id]
	}
	if sum > b {
		t.Errorf("shares sum to %v, above the budget %v", sum, b)
	}
	wantSum := min(b, totalDemand)
	if spare == SpareEqual && len(demands) > 0 {
		wantSum = b
	}
	if sum < wantSum*(1-rel) {
		t.Errorf("shares sum to %v, want %v (budget %v, demand %v)", sum, wantSum, b, totalDemand)
	}
	for id, d := range demands {
		d := cleanDemand(d, b)
		if s := got[id]; s < d*(1-rel) {
			if totalDemand <= b {
				t.Errorf("share of %q = %v under its demand %v though demands fit", id, s, d)
			}
			if s < maxShare*(1-rel) {
				t.Errorf("share of %q = %v under its demand %v and under another share %v", id, s, d, maxShare)
			}
		}
	}
	again := Shares(budget, copyMap(demands), spare)
	for id, s := range got {
		if math.Float64bits(again[id]) != math.Float64bits(s) {
			t.Fatalf("share of %q = %v, then %v from the same inputs", id, s, again[id])
		}
	}
}

func copyMap(m map[string]float64) map[string]float64 {
	out := make(map[string]float64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
