package quota

import (
	"cmp"
	"math"
	"time"
)

// Unknown is the demand of a client whose rate has not been measured yet
// (its first report). It counts as wanting the whole budget, so a newcomer
// gets a fair share at once instead of a share sized from a report that
// covers an unknown span (Envoy sends one at a bucket's first request, and
// a stream that moved from another replica starts mid-interval). Stores do
// not let it replace a known demand that is still live (DemandStore.Report).
var Unknown = math.Inf(1)

// MinSpan is the shortest span a demand sample is measured over. Reports
// closer together (Envoy's extra report at a bucket's first request, a
// reconnect) are added to the next sample instead of dividing by a tiny
// span and inflating the rate.
const MinSpan = time.Second

// Meter turns the usage reports of one client for one bucket into that
// client's demand in requests per second. The zero value is ready to use.
// It is not safe for concurrent use: one Meter per (stream, bucket), fed in
// report order.
//
// A sample is (allowed + denied) / the time since the previous sample:
// offered load, what the client would admit with no limit, whatever share it
// was holding. The demand is the larger of the last two samples. Envoy
// reports every 5 s; an EWMA would lag behind a client that ramps up and
// under-assign it for several intervals, while the maximum of two follows a
// rise at the first report, does not halve a steady client's demand when a
// report boundary splits its traffic unevenly, and forgets a spike (or a
// client gone quiet) after two reports: the same horizon as the store's TTL.
type Meter struct {
	// MinSpan is the shortest span of a sample; zero means the package's
	// MinSpan (Envoy's reports). Package allotment samples every lease.
	MinSpan time.Duration

	last       time.Time // end of the span measured so far
	pending    uint64    // requests counted since last
	prev, cur  float64   // the last two samples
	hasSamples bool
}

// Observe takes one report's counts, received at now, and returns the
// client's demand: Unknown until a span of at least MinSpan has been
// measured. The counts of the very first report are discarded: the span
// they cover is unknown.
func (m *Meter) Observe(allowed, denied uint64, now time.Time) float64 {
	if m.last.IsZero() {
		m.last = now
		return Unknown
	}
	m.pending = addSat(m.pending, addSat(allowed, denied))
	span := now.Sub(m.last)
	if span < cmp.Or(m.MinSpan, MinSpan) {
		return m.Demand()
	}
	m.prev, m.cur = m.cur, float64(m.pending)/span.Seconds()
	m.hasSamples = true
	m.pending, m.last = 0, now
	return m.Demand()
}

// Demand is the current demand: the larger of the last two samples, or
// Unknown before the first.
func (m *Meter) Demand() float64 {
	if !m.hasSamples {
		return Unknown
	}
	return max(m.prev, m.cur)
}

func addSat(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint64
}
