package quota

import (
	"math"
	"sort"
)

// Spare says what happens to the part of the budget that the demands leave
// unused (when they add up to less than the budget).
type Spare int

const (
	// SpareEqual splits the unused budget equally among the clients, on top
	// of their demands. A client's demand is what it wanted during the last
	// reports; a client that ramps up, or that reported no traffic and gets
	// its first request, would otherwise be held to that until the next
	// report and allocation. Equal rather than proportional to demand, so
	// that a client whose demand was zero still gets room: proportional
	// headroom would hand it nothing, which an Envoy enforces as deny-all.
	// The shares then add up to the whole budget, never more.
	SpareEqual Spare = iota
	// SpareNone keeps the unused budget back: each client gets exactly its
	// demand when the demands fit. For clients whose grants are charged to
	// a shared counter (allotments), so unused budget stays with the
	// counter instead of being leased out.
	SpareNone
)

// Valid reports whether s is a known policy.
func (s Spare) Valid() bool { return s == SpareEqual || s == SpareNone }

// claim is one client's clean demand.
type claim struct {
	id     string
	demand float64
}

// Shares divides budget (tokens per second) among the clients of demands
// (client ID -> tokens per second) max-min fairly: a client that wants less
// than an equal split of what is left gets what it wants, the rest is split
// equally among the others (water-filling). What the demands leave unused is
// then handed out as spare says.
//
// Inputs are cleaned first, so any input gives an answer: a budget that is
// not a finite non-negative number counts as 0; a demand that is NaN or
// negative counts as 0, and a demand above the budget (including +Inf,
// Unknown) counts as the budget.
//
// Guarantees: every share is finite and >= 0; the shares, summed in client-ID
// order, never exceed the budget; the result depends only on the inputs, not
// on map order, so every replica computes the same shares bit for bit.
// Cost: O(n log n) for n clients.
func Shares(budget float64, demands map[string]float64, spare Spare) map[string]float64 {
	budget = cleanBudget(budget)
	claims := sortedClaims(budget, demands)
	shares := waterFill(budget, claims)
	if spare == SpareEqual && len(claims) > 0 {
		addSpare(budget, shares)
	}
	fitBudget(budget, claims, shares)
	out := make(map[string]float64, len(claims))
	for i, c := range claims {
		out[c.id] = shares[i]
	}
	return out
}

func cleanBudget(b float64) float64 {
	if math.IsNaN(b) || math.IsInf(b, 0) || b < 0 {
		return 0
	}
	return b
}

// cleanDemand maps d into [0, budget]: a demand above the budget competes
// exactly like one equal to it, and clamping keeps +Inf out of the sums.
func cleanDemand(d, budget float64) float64 {
	if math.IsNaN(d) || d < 0 {
		return 0
	}
	return math.Min(d, budget)
}

// sortedClaims returns the clean demands by ascending demand, ties by client
// ID: the order water-filling needs, and one that does not depend on map
// iteration.
func sortedClaims(budget float64, demands map[string]float64) []claim {
	claims := make([]claim, 0, len(demands))
	for id, d := range demands {
		claims = append(claims, claim{id: id, demand: cleanDemand(d, budget)})
	}
	sort.Slice(claims, func(i, j int) bool {
		if claims[i].demand != claims[j].demand {
			return claims[i].demand < claims[j].demand
		}
		return claims[i].id < claims[j].id
	})
	return claims
}

// waterFill gives each claim (ascending demand) min(demand, level), where
// level is what is left split equally among the claims not yet served. At
// the first claim above the level every remaining claim gets that same level
// (one value, so equal demands get bit-identical shares).
func waterFill(budget float64, claims []claim) []float64 {
	shares := make([]float64, len(claims))
	remaining := budget
	for i, c := range claims {
		level := remaining / float64(len(claims)-i)
		if c.demand > level {
			for j := i; j < len(claims); j++ {
				shares[j] = level
			}
			return shares
		}
		shares[i] = c.demand
		remaining = math.Max(remaining-c.demand, 0)
	}
	return shares
}

// addSpare splits budget minus the shares equally among all clients.
func addSpare(budget float64, shares []float64) {
	spare := budget - sum(shares)
	if spare <= 0 {
		return
	}
	each := spare / float64(len(shares))
	for i := range shares {
		shares[i] += each
	}
}

// fitBudget scales the shares down by the smallest factor that brings their
// sum in client-ID order to at most the budget. The arithmetic above is exact
// up to rounding, so this moves shares by a few ulps at most; it exists so
// that "never above the budget" holds exactly, not nearly.
func fitBudget(budget float64, claims []claim, shares []float64) {
	byID := make([]int, len(claims))
	for i := range byID {
		byID[i] = i
	}
	sort.Slice(byID, func(a, b int) bool { return claims[byID[a]].id < claims[byID[b]].id })
	for range maxFitRounds {
		total := sumAt(shares, byID)
		if total <= budget {
			return
		}
		f := math.Nextafter(budget/total, 0)
		if math.IsInf(total, 1) {
			// Shares near MaxFloat64 overflowed the sum: their halves
			// cannot (scaling by 1/2 is exact).
			f = math.Nextafter((budget/2)/sumHalves(shares, byID), 0)
		}
		for i := range shares {
			shares[i] *= f
		}
	}
	// Not reached in practice (one round suffices); zero is the answer that
	// can never exceed the budget.
	for i := range shares {
		shares[i] = 0
	}
}

// maxFitRounds bounds fitBudget's loop.
const maxFitRounds = 8

func sum(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s
}

func sumHalves(xs []float64, order []int) float64 {
	var s float64
	for _, i := range order {
		s += xs[i] / 2
	}
	return s
}

func sumAt(xs []float64, order []int) float64 {
	var s float64
	for _, i := range order {
		s += xs[i]
	}
	return s
}
