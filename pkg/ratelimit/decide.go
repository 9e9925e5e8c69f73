package ratelimit

import (
	"math"
	"math/bits"
	"time"
)

// State is the stored state of one limit on one key, as the in-process
// algorithms keep it (the Redis store keeps the same information in Redis
// types; see docs/algorithms.md). Each algorithm uses only some fields; the
// zero State is the empty state of every algorithm.
type State struct {
	// Expires is the instant, in microseconds since the Unix epoch, from
	// which the state is equivalent to the empty state: a store may forget
	// it then without changing any decision. Zero means empty.
	Expires int64
	// TAT is gcra's theoretical arrival time, µs since the epoch.
	TAT int64
	// Window is the index (floor(now / Period)) of the window Count belongs
	// to, for fixed_window and sliding_window.
	Window int64
	// Count is the hits counted in Window (fixed_window, sliding_window), or
	// the total hits held in Log (sliding_log).
	Count int64
	// Prev is, for sliding_window, the hits counted in Window-1.
	Prev int64
	// Log holds sliding_log's admitted (or forcibly charged) hits, oldest
	// first. A State returned
	// by Decide may share Log's memory with the State passed in: store at
	// most one of the States computed from the same input.
	Log []LogRun
}

// LogRun is N hits admitted at the same instant by sliding_log.
type LogRun struct {
	// At is when the hits were admitted, µs since the epoch.
	At int64
	// N is how many hits were admitted at At; at least 1.
	N int64
}

// Decide applies hits at now (µs since the Unix epoch) to s under l and
// returns the Result and the state to store if the hits are to be charged.
// Decide is pure: it neither keeps nor modifies s. A caller deciding several
// limits for one request stores the next states only when every Result is
// Allowed and hits > 0; a denied Result or hits == 0 never needs a write.
//
// Errors: ErrInvalidLimit when l fails Validate, ErrInvalidHits when hits is
// negative. The semantics are those of docs/algorithms.md, shared with the
// Redis store's scripts.
func Decide(l Limit, now int64, s State, hits int64) (Result, State, error) {
	res, err := s.Apply(l, now, hits)
	return res, s, err
}

// DecideCharge is Decide under a charge mode (see ChargeMode): with
// ChargeNever the returned state is s itself, with ChargeAlways it is the
// state after the charge whatever the Result, and a caller stores it for
// every limit of the request (unless hits is 0); with ChargeReserve it is
// the state after the charge when the Result is Allowed, and a caller
// stores it when every limit of the request is.
func DecideCharge(l Limit, now int64, s State, hits int64, m ChargeMode) (Result, State, error) {
	var res Result
	err := s.ApplyCharge(&res, &l, now, hits, m)
	return res, s, err
}

// Apply is Decide in place, for a store holding the state of a
// single-limit request: when the hits are admitted and hits > 0, *s becomes
// the next state. Otherwise *s keeps deciding as before: hits == 0 leaves it
// untouched, and a denial may only reset an expired *s to the empty State.
// It saves copying States in and out on the hot path.
func (s *State) Apply(l Limit, now int64, hits int64) (Result, error) {
	var res Result
	err := s.ApplyTo(&res, &l, now, hits)
	return res, err
}

// ApplyTo is Apply writing the Result to *res and reading the limit through
// a pointer, for a store's hot path. A Result has too many fields for the
// compiler to keep in registers, so every by-value hand-over copies it
// through the stack, and reading back a struct just written field by field
// stalls the CPU (a failed store-to-load forward), several times per
// decision. *res is written when the error is nil and left alone otherwise.
func (s *State) ApplyTo(res *Result, l *Limit, now int64, hits int64) error {
	return s.ApplyCharge(res, l, now, hits, ChargeIfAdmitted)
}

// ApplyCharge is ApplyTo under a charge mode: ChargeNever leaves *s as
// hits == 0 does, ChargeAlways makes *s the state after the charge whatever
// the Result, ChargeReserve when its one hit is admitted (see ChargeMode).
func (s *State) ApplyCharge(res *Result, l *Limit, now, hits int64, m ChargeMode) error {
	if !l.valid() {
		return l.Validate() // builds the error; valid is its fast, inlined twin
	}
	if hits < 0 || m != ChargeIfAdmitted {
		if err := CheckCharge(hits, m); err != nil {
			return err
		}
	}
	var check State
	if hits == 0 || m == ChargeNever { // a check writes nothing, not even an equivalent state
		check = *s
		s = &check
	}
	if s.Expires <= now {
		*s = State{}
	}
	switch m {
	case ChargeAlways:
		*res = chargeAlways(l, now, s, hits)
	case ChargeReserve:
		reserve(res, l, now, s, hits)
	default:
		decideHits(res, l, now, s, hits)
	}
	return nil
}

// decideHits decides hits under l: each algorithm replaces *s by the next state
// when it admits and leaves it alone when it denies. *s is not expired.
func decideHits(res *Result, l *Limit, now int64, s *State, hits int64) {
	switch l.Algorithm {
	case SlidingLog:
		*res = slidingLog(l, now, s, hits)
	case SlidingWindow:
		*res = slidingWindow(l, now, s, hits)
	case FixedWindow:
		*res = fixedWindow(l, now, s, hits)
	default:
		gcra(l, now, s, hits, res)
	}
}

// reserve is ChargeReserve: admission on one hit, checked on a copy of *s;
// an admitted request is charged its hits as ChargeAlways would, and is
// reported admitted even when the charge leaves the state over the limit.
// A refusal leaves *s alone. The Redis scripts mirror it (decide.lua).
func reserve(res *Result, l *Limit, now int64, s *State, hits int64) {
	check := *s
	if decideHits(res, l, now, &check, 1); !res.Allowed {
		return
	}
	*res = chargeAlways(l, now, s, hits)
	res.Allowed, res.RetryAfter = true, 0
}

// periodMicros returns l.Period in microseconds (Validate ensures >= 1000).
func periodMicros(l *Limit) int64 { return l.Period.Microseconds() }

// micros converts a span of microseconds to a Duration, saturating instead
// of overflowing (a Duration holds about 292 years) and never negative.
func micros(us int64) time.Duration {
	switch {
	case us <= 0:
		return 0
	case us > math.MaxInt64/int64(time.Microsecond):
		return math.MaxInt64
	}
	return time.Duration(us) * time.Microsecond
}

// floorDiv is a / b rounded towards negative infinity (b > 0), so that
// window indexes stay correct for instants before the epoch.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// addSat and mulSat saturate at the int64 range. The Redis scripts compute in
// doubles; the two agree as long as every value stays below 2^53 µs (about
// 285 years), far beyond any sensible limit, and the Go side cannot wrap.
func addSat(a, b int64) int64 {
	s := a + b
	switch {
	case a > 0 && b > 0 && s < 0:
		return math.MaxInt64
	case a < 0 && b < 0 && s >= 0:
		return math.MinInt64
	}
	return s
}

func subSat(a, b int64) int64 {
	if b == math.MinInt64 {
		return addSat(addSat(a, math.MaxInt64), 1)
	}
	return addSat(a, -b)
}

// mulSat multiplies non-negative a and b, saturating at math.MaxInt64.
// bits.Mul64 detects overflow without a division, which costs more than the
// rest of a GCRA decision.
func mulSat(a, b int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(lo)
}
