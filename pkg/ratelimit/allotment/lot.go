package allotment

import (
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// lot is the tokens of one lease. They were charged to the shared store when
// leased; a token may be used only while using it then would also have been
// admitted had it been decided on the store at that instant (the lapse rules
// below), so whatever the replicas do with their lots, the fleet's uses are a
// sequence the exact algorithm admits.
type lot struct {
	n    int64 // tokens leased
	used int64 // tokens taken or lapsed: for gcra the index of the next token
	// lapse is, for the window algorithms, the instant every token lapses:
	// the end of the window they were charged in. For gcra it is slot 0,
	// the virtual instant of token 0; token k's slot is lapse + k*emit and
	// the token may be used at or before its slot only.
	lapse time.Time
	emit  time.Duration // gcra's emission interval T; 0 for the windows
}

// emission is gcra's emission interval T = max(floor(P/R), 1) µs, computed
// as the store's scripts compute it.
func emission(l ratelimit.Limit) time.Duration {
	return time.Duration(max(l.Period.Microseconds()/l.Requests, 1)) * time.Microsecond
}

// newLot builds the lot of n tokens leased with res, whose request was sent
// at sent (local clock, read before sending: every instant derived from it
// is at or before the store's own, whatever the latency).
//
//   - fixed_window: ResetAfter is the time to the window's end.
//   - sliding_window: after a charge ResetAfter is 2P - elapsed (the charged
//     window ends in P - elapsed, and its weight lasts one period more): the
//     window ends at ResetAfter - P.
//   - gcra: ResetAfter is newTAT - now, and the n tokens are the cells
//     newTAT - n*T ... newTAT - T: slot 0 is sent + ResetAfter - n*T.
func newLot(l ratelimit.Limit, n int64, res ratelimit.Result, sent time.Time) *lot {
	switch l.Algorithm {
	case ratelimit.FixedWindow:
		return &lot{n: n, lapse: sent.Add(res.ResetAfter)}
	case ratelimit.SlidingWindow:
		return &lot{n: n, lapse: sent.Add(res.ResetAfter - l.Period)}
	}
	t := emission(l)
	return &lot{n: n, lapse: sent.Add(res.ResetAfter - time.Duration(n)*t), emit: t}
}

// next returns the index of the first token usable at now.
func (o *lot) next(now time.Time) int64 {
	if o.emit == 0 {
		if now.Before(o.lapse) {
			return o.used
		}
		return o.n
	}
	late := now.Sub(o.lapse)
	if late <= 0 {
		return o.used
	}
	k := int64((late + o.emit - 1) / o.emit) // ceil: the first slot at or after now
	return min(max(o.used, k), o.n)
}

// available is how many tokens can be used at now.
func (o *lot) available(now time.Time) int64 { return o.n - o.next(now) }

// take uses up to want tokens at now and returns how many it took and how
// many lapsed unused on the way (gcra tokens whose slot passed).
func (o *lot) take(want int64, now time.Time) (took, lapsed int64, from int64) {
	k := o.next(now)
	if o.emit != 0 {
		lapsed = k - o.used
	} else if k == o.n {
		lapsed = o.n - o.used
	}
	took = min(want, o.n-k)
	o.used = k + took
	return took, lapsed, k
}

// giveBack returns n tokens taken from index from at now (a request denied
// by another of its limits). Window tokens are interchangeable; a gcra token
// keeps its slot, so they come back only when nothing was taken after them.
// Tokens not given back are lost, which only admits less; the result says
// whether they came back.
func (o *lot) giveBack(from, n int64, now time.Time) bool {
	switch {
	case o.emit == 0 && now.Before(o.lapse) && o.used >= n:
		o.used -= n
		return true
	case o.emit != 0 && o.used == from+n:
		o.used = from
		return true
	}
	return false
}
