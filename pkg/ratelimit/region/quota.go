package region

import (
	"context"
	"math"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// QuotaAsk is what an RLQS server asks of a global limit for one bucket.
type QuotaAsk struct {
	// Demand is the region's RLQS Envoys' demand for the bucket, requests
	// per second (+Inf: not measured yet; the rule's whole rate is asked).
	Demand float64
	// Burst is how long a share's token bucket holds (quota.BucketOptions'
	// Burst): an Envoy may admit its share × Burst at once, on top of its
	// rate, in any window.
	Burst time.Duration
	// Horizon is how long an assignment made now may be enforced before
	// the server replaces it: the RLQS tick and a message in flight.
	Horizon time.Duration
}

// quotaHeadroom is how much above the Envoys' measured demand is reserved,
// and quotaSlack the hits added: demand moves between reports.
const (
	quotaHeadroom = 1.25
	quotaSlack    = 2
)

// QuotaBudget is the rate (requests per second) the region's RLQS Envoys
// may be assigned, together, of the global limit l of key for the next
// ask.Horizon; it records their demand, which the exchanger reports with
// the region's own.
//
// The RLQS Envoys' part of the region's cap is reserved in the region's
// Redis before it is assigned (local_quota.lua): for the current window, and
// for the next one once it starts within the horizon, the reservation rises
// towards the demand's hits as far as the cap leaves room after what the
// window admitted, and it is never lowered within its window. Decisions
// and the exchanger's lowering count it as admitted. The rate returned is
// the least reservation of those windows over Period + Burst: a token
// bucket of that rate and a burst of Burst admits at most the reservation
// in any window of Period, so what the region's Envoys and its decisions
// admit in a window stays within its cap as long as each assignment is
// replaced within the horizon (docs/multi-region.md).
func (s *Store) QuotaBudget(ctx context.Context, key string, l ratelimit.Limit, ask QuotaAsk) (float64, error) {
	if err := l.Validate(); err != nil {
		return 0, err
	}
	r, k := s.ruleOf(l), globalKey(key, l)
	if !staticSplit(r, len(s.ex.topo.Regions)) {
		s.ex.Track(k, r)
	}
	span := r.Period + max(ask.Burst, 0)
	// Not measured yet (+Inf): compete for the whole limit, as the
	// exchanger's first report does.
	want, recorded := r.Limit, float64(r.Limit)
	if d := ask.Demand; d >= 0 && !math.IsInf(d, 1) {
		want = min(r.Limit, int64(math.Ceil(d*span.Seconds()*quotaHeadroom))+quotaSlack)
		recorded = d * r.Period.Seconds()
		if d == 0 {
			want = 0
		}
	}
	got, err := s.ex.local.reserve(ctx, k, r, s.ex.topo, want, recorded, ask.Horizon)
	if err != nil {
		return 0, err
	}
	return float64(got) / span.Seconds(), nil
}
