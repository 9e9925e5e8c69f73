package allotment

import (
	"math"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/quota"
)

// slice is what one replica holds of one limit on one key: its lots, the
// lease in flight, a remembered denial, and the demand that sizes the next
// lease. Its fields are guarded by mu in the table entry that holds it.
type slice struct {
	limit ratelimit.Limit
	lots  []*lot // oldest first
	// leasing is closed when the lease in flight (at most one) is done.
	leasing chan struct{}
	// failed is the newest lease that failed, which the requests that
	// waited for it share (failure.go).
	failed failure
	// last is the newest granted lease's Result, sent when it was sent;
	// lastN its size (the prefetch low-water mark is half of it).
	last   ratelimit.Result
	sent   time.Time
	lastN  int64
	leased bool // last is set
	// primary is false when the newest lease was answered by a fallback
	// (the failure mode), whose denials must not be remembered upstream.
	primary bool
	// denied remembers a store denial of deniedHits or more hits until
	// deniedUntil, so a key over its limit is not asked on every request.
	denied      ratelimit.Result
	deniedAt    time.Time
	deniedUntil time.Time
	deniedHits  int64
	// noPrefetchUntil holds prefetches back after one was refused.
	noPrefetchUntil time.Time
	// demand is the hits asked since the last lease began; meter turns it
	// into hits per second at each lease; waiting is the hits of requests
	// waiting for the lease in flight.
	demand, waiting int64
	meter           quota.Meter
	// seen is the instant of the newest request for the slice. A request
	// that finds it empty after more than the horizon of silence treats the
	// key as cold again (Store.cool), which drops the slice (dropped).
	seen    time.Time
	dropped bool
	// holder names the slice in the store's lease ledgers (set at its
	// first lease); reports counts the leases it sent, each reporting the
	// tokens it held then.
	holder  string
	reports uint64
}

// available is the tokens usable at now over every lot.
func (s *slice) available(now time.Time) int64 { return s.availableIn(len(s.lots), now) }

// availableIn is the tokens usable at now in the first k lots.
func (s *slice) availableIn(k int, now time.Time) int64 {
	var n int64
	for _, o := range s.lots[:min(k, len(s.lots))] {
		n += o.available(now)
	}
	return n
}

// part is the tokens a reservation took from one lot.
type part struct {
	entry   *entry
	lot     *lot
	from, n int64
	// report is the slice's reports when the tokens were taken: a lease
	// sent since reported the slice's tokens without them, so they may no
	// longer come back (the store would not count them at a reset).
	report uint64
}

// maxParts bounds the lots one reservation spans: a slice holds its lot and
// at most one prefetched (a third only while an old lot lingers). Kept
// inline, a reservation costs no allocation.
const maxParts = 3

// reservation is the tokens one limit of a request took.
type reservation struct {
	parts [maxParts]part
	n     int
}

func (r *reservation) list() []part { return r.parts[:r.n] }

// reserve takes hits tokens at now from the oldest lots, all or none, and
// reports the tokens that lapsed unused on the way. Spent lots are dropped.
func (s *slice) reserve(e *entry, hits int64, now time.Time) (reservation, bool, int64) {
	var r reservation
	if s.availableIn(maxParts, now) < hits {
		return r, false, s.prune(now)
	}
	var lapsed int64
	want := hits
	for _, o := range s.lots[:min(maxParts, len(s.lots))] {
		if want == 0 {
			break
		}
		took, l, from := o.take(want, now)
		lapsed += l
		if took > 0 {
			r.parts[r.n] = part{entry: e, lot: o, from: from, n: took, report: s.reports}
			r.n++
			want -= took
		}
	}
	return r, true, lapsed + s.prune(now)
}

// prune drops the lots with nothing usable left at now and returns the
// tokens they held unused (lapsed).
func (s *slice) prune(now time.Time) int64 {
	var lapsed int64
	keep := s.lots[:0]
	for _, o := range s.lots {
		if o.available(now) > 0 {
			keep = append(keep, o)
			continue
		}
		_, l, _ := o.take(0, now) // counts what lapsed since the last take
		lapsed += l
	}
	clear(s.lots[len(keep):])
	s.lots = keep
	return lapsed
}

// remembered returns the remembered denial of hits at now, aged, if any.
func (s *slice) remembered(hits int64, now time.Time) (ratelimit.Result, bool) {
	if hits < s.deniedHits || !now.Before(s.deniedUntil) {
		return ratelimit.Result{}, false
	}
	return aged(s.denied, now.Sub(s.deniedAt)), true
}

// aged shortens a Result's durations by the time since it was decided.
func aged(r ratelimit.Result, elapsed time.Duration) ratelimit.Result {
	r.ResetAfter = max(r.ResetAfter-elapsed, 0)
	if !r.Allowed {
		r.RetryAfter = max(r.RetryAfter-elapsed, time.Microsecond)
	}
	return r
}

// result is the Result of an allotment decision at now: the newest lease's,
// aged, its Remaining (what the store had left) plus the tokens this
// replica holds unused: an estimate, as other replicas hold theirs.
func (s *slice) result(allowed bool, now time.Time) ratelimit.Result {
	r := aged(s.last, now.Sub(s.sent))
	r.Allowed, r.RetryAfter = allowed, 0
	r.Remaining = max(r.Remaining, 0) + s.available(now)
	if !s.leased {
		r.Limit = reported(s.limit)
	}
	return r
}

// reported is the quota reported to clients: Requests, or Burst for gcra
// when larger (as the stores report it).
func reported(l ratelimit.Limit) int64 {
	if l.Algorithm.OrDefault() == ratelimit.GCRA {
		return max(l.Requests, l.Burst)
	}
	return l.Requests
}

// noteDemand counts hits asked.
func (s *slice) noteDemand(hits int64) { s.demand += hits }

// sample closes a demand sample when a lease begins at now. quota.Meter,
// which measures RLQS clients, measures this replica too: the rate is the
// larger of its last two samples, so a rise shows at once and a spike is
// forgotten after two leases; its minimum span is one microsecond here (a
// lease samples a slice's lifetime, milliseconds for a hot key).
func (s *slice) sample(now time.Time) {
	s.meter.MinSpan = time.Microsecond
	s.meter.Observe(uint64(max(s.demand, 0)), 0, now)
	s.demand = 0
}

// startMeter starts a new slice's meter at prev, its key's previous
// request (seen by the doorkeeper, decided as exact), which a meter's first
// observation only marks. The slice's first lease, of one token, then
// measures the demand since prev, and the second is sized from it.
func (s *slice) startMeter(prev time.Time) { s.sample(prev) }

// size is the next lease's size: the tokens the demand uses in horizon,
// at least 1, at most maxN. A gcra lease also covers the horizon in slot
// time once the key's demand expects a request within the horizon (a
// colder key leases what its demand uses, one token): its tokens may be
// used only until their slots (lot.go), which a bucket that is not drained
// puts at now, now+T, ...; a lease of demand x horizon tokens would then span demand x
// horizon x T, microseconds for a key far below a high limit, and lapse
// before the next request came, costing a round trip per request. Covering
// the horizon charges the key's rate for it: the tokens nobody uses lapse
// at their slots, which is the refill a full bucket would have capped
// anyway, and the bucket holds at most the slices outstanding fewer tokens
// (docs/algorithms.md, "Consistency").
func (s *slice) size(horizon time.Duration, maxN int64) int64 {
	rate := s.meter.Demand()
	if rate == quota.Unknown {
		return 1 // not measured yet: a new slice
	}
	expected := rate * horizon.Seconds() // requests expected within the horizon
	want := math.Ceil(expected)
	if s.limit.Algorithm.OrDefault() == ratelimit.GCRA && expected >= 1 {
		want = max(want, math.Ceil(float64(horizon)/float64(emission(s.limit))))
	}
	if want >= float64(maxN) {
		return maxN
	}
	return max(int64(want), 1)
}
