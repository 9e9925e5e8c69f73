package quota

import (
	"encoding/binary"
	"math"
	"strconv"
	"testing"
)

// FuzzShares checks the invariants of Shares (checkShares) and BucketFor
// (checkBucket) for arbitrary budgets and demands: the fuzzer's bytes are
// read as float64 demands, so NaN, infinities, negatives, denormals and ties
// all come up.
func FuzzShares(f *testing.F) {
	f.Add(100.0, []byte{}, false)
	f.Add(10.0, floats(2, 3, 100), false)
	f.Add(10.0, floats(5, 5, 5), true)
	f.Add(1e-300, floats(1e-310, 0, -1), false)
	f.Add(math.MaxFloat64, floats(math.MaxFloat64, math.Inf(1), math.NaN()), true)
	f.Add(7.0, floats(0.1, 0.2, 0.3, 1e9, 1e9), false)
	f.Fuzz(func(t *testing.T, budget float64, raw []byte, none bool) {
		demands := map[string]float64{}
		for i := 0; i+8 <= len(raw) && i < 8*512; i += 8 {
			demands["c"+strconv.Itoa(i/8)] = math.Float64frombits(binary.LittleEndian.Uint64(raw[i:]))
		}
		spare := SpareEqual
		if none {
			spare = SpareNone
		}
		got := Shares(budget, demands, spare)
		checkShares(t, budget, demands, spare, got)
		var enforced float64
		for _, r := range got {
			b := BucketFor(r, BucketOptions{})
			checkBucket(t, r, BucketOptions{}, b)
			enforced += b.Rate()
		}
		if b := cleanBudget(budget); enforced > b*(1+1e-12) {
			t.Fatalf("buckets enforce %v in all, above the budget %v", enforced, b)
		}
	})
}

func floats(xs ...float64) []byte {
	out := make([]byte, 0, 8*len(xs))
	for _, x := range xs {
		out = binary.LittleEndian.AppendUint64(out, math.Float64bits(x))
	}
	return out
}
