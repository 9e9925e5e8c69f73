// Package ratelimit decides whether a caller is within its allowance.
//
// It knows nothing of Envoy or gRPC: callers name a key (see Key), the limits
// that apply to it and how many hits the request costs, and get back one
// Result per limit. Being over the limit is a Result, never an error; an
// error means the backing store failed, and what to do then (fail open or
// closed) is decided by the caller.
//
// Four algorithms are offered (see Algorithm). All of them compute in integer
// microseconds so that the in-process implementations in this package and the
// Lua scripts of the Redis store give the same answers for the same calls.
package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Algorithm names a rate-limiting algorithm.
type Algorithm string

// The supported algorithms. The zero value means GCRA.
const (
	// GCRA is a token bucket computed as the Generic Cell Rate Algorithm:
	// bursts up to Limit.Burst, then one request per Period/Requests.
	GCRA Algorithm = "gcra"
	// SlidingLog keeps the timestamp of every admitted request: an exact
	// rolling window, memory O(Requests) per key.
	SlidingLog Algorithm = "sliding_log"
	// SlidingWindow weights the previous fixed window by its overlap with
	// the rolling window: approximate, O(1) state.
	SlidingWindow Algorithm = "sliding_window"
	// FixedWindow counts per window aligned to the Unix epoch, as
	// envoyproxy/ratelimit does; it admits up to 2x Requests across an edge.
	FixedWindow Algorithm = "fixed_window"
)

// Algorithms returns every supported algorithm, default first (a new slice
// each call, so no caller can change another's list).
func Algorithms() []Algorithm {
	return []Algorithm{GCRA, SlidingLog, SlidingWindow, FixedWindow}
}

// Valid reports whether a names a supported algorithm (the empty name is GCRA).
func (a Algorithm) Valid() bool {
	switch a {
	case "", GCRA, SlidingLog, SlidingWindow, FixedWindow:
		return true
	}
	return false
}

// OrDefault returns a, or GCRA when a is empty.
func (a Algorithm) OrDefault() Algorithm {
	if a == "" {
		return GCRA
	}
	return a
}

// Consistency says how a limit shared by several replicas is decided.
type Consistency string

// The consistency modes. The zero value means Exact.
const (
	// Exact decides every hit on the shared store (one Redis round trip).
	Exact Consistency = "exact"
	// Allotment lets a replica lease a slice of a key's budget from the
	// shared store in one atomic step and decide from it locally (package
	// allotment): the fleet never admits more than the limit, and may admit
	// less by at most the slices leased but not used. sliding_log cannot be
	// leased: its state is each admission's timestamp, and a leased hit
	// would carry the lease's instant, not its use's.
	Allotment Consistency = "allotment"
)

// Valid reports whether c names a supported mode (the empty name is Exact).
func (c Consistency) Valid() bool { return c == "" || c == Exact || c == Allotment }

// OrDefault returns c, or Exact when c is empty.
func (c Consistency) OrDefault() Consistency {
	if c == "" {
		return Exact
	}
	return c
}

// Scope says where a limit holds.
type Scope string

// The scopes. The zero value means Regional.
const (
	// Regional limits hold within one store: the region's Redis, as
	// always.
	Regional Scope = "region"
	// Global limits hold across regions: each region decides locally
	// against a leased share of the limit (package region). Only
	// fixed_window: shares are per-window budgets.
	Global Scope = "global"
)

// Valid reports whether s names a supported scope (the empty name is Regional).
func (s Scope) Valid() bool { return s == "" || s == Regional || s == Global }

// Limit is one allowance: Requests per Period, decided by Algorithm.
type Limit struct {
	// Name labels the limit in headers and metrics; optional.
	Name string
	// Algorithm decides how hits are counted; empty means GCRA.
	Algorithm Algorithm
	// Requests is how many hits are admitted per Period; at least 1.
	Requests int64
	// Period is the window (or, for GCRA, the time to refill Requests);
	// at least one millisecond, a whole number of milliseconds.
	Period time.Duration
	// Burst is, for GCRA only, how many hits may be admitted at once;
	// zero means Requests. Other algorithms ignore it.
	Burst int64
	// Consistency is how replicas share the limit; empty means Exact. It is
	// no part of the limit's state: a store keeps one state whatever the
	// mode, so switching a limit between modes keeps its count. Stores that
	// decide on one shared state treat Allotment as Exact; package
	// allotment is what leases.
	Consistency Consistency
	// Scope is where the limit holds; empty means Regional. A Global limit
	// is decided by package region's store, which other stores never see.
	Scope Scope
	// Floor is, for a Global limit, the fraction of Requests each region
	// may admit per window while cut off from the global store, reserved
	// for it by the allocator; in [0, 1].
	Floor float64
}

// Terms are what identify a limit's state apart from its key: the
// algorithm (defaulted) and its numbers. Consistency is no part of them:
// exact and allotment decide on one shared state. Comparable, so a map
// keyed by it hashes without allocating.
type Terms struct {
	Algorithm       Algorithm
	Requests, Burst int64
	Period          time.Duration
}

// Terms returns l's Terms.
func (l Limit) Terms() Terms {
	return Terms{Algorithm: l.Algorithm.OrDefault(), Requests: l.Requests, Burst: l.Burst, Period: l.Period}
}

// Validate reports what is wrong with l, or nil.
func (l Limit) Validate() error {
	switch {
	case !l.Algorithm.Valid():
		return fmt.Errorf("%w: unknown algorithm %q", ErrInvalidLimit, l.Algorithm)
	case l.Requests < 1:
		return fmt.Errorf("%w: requests must be at least 1, got %d", ErrInvalidLimit, l.Requests)
	case l.Period < time.Millisecond || l.Period%time.Millisecond != 0:
		return fmt.Errorf("%w: period must be a whole number of milliseconds, at least 1ms, got %s", ErrInvalidLimit, l.Period)
	case l.Burst < 0:
		return fmt.Errorf("%w: burst must not be negative, got %d", ErrInvalidLimit, l.Burst)
	case !l.Consistency.Valid():
		return fmt.Errorf("%w: unknown consistency %q (want exact or allotment)", ErrInvalidLimit, l.Consistency)
	case !l.Scope.Valid():
		return fmt.Errorf("%w: unknown scope %q (want region or global)", ErrInvalidLimit, l.Scope)
	case l.Scope == Global && l.Algorithm != FixedWindow:
		return fmt.Errorf("%w: scope global needs algorithm fixed_window: a region's share is a budget per window", ErrInvalidLimit)
	case l.Scope == Global && l.Consistency == Allotment:
		return fmt.Errorf("%w: scope global decides in the region's store from its share; it cannot also use allotment", ErrInvalidLimit)
	case l.Floor < 0 || l.Floor > 1 || l.Floor != l.Floor:
		return fmt.Errorf("%w: floor must be in [0, 1], got %v", ErrInvalidLimit, l.Floor)
	case l.Floor != 0 && l.Scope != Global:
		return fmt.Errorf("%w: floor applies to scope global only", ErrInvalidLimit)
	case l.Consistency == Allotment && l.Algorithm == SlidingLog:
		return fmt.Errorf("%w: sliding_log cannot use allotment: its state is each admission's instant, and a leased hit "+
			"would be counted at the lease's instant, not its use's, so later windows would miss it (use gcra, fixed_window or sliding_window)", ErrInvalidLimit)
	case l.Algorithm == SlidingLog && l.Requests > MaxSlidingLogRequests:
		return fmt.Errorf("%w: sliding_log keeps one entry per admitted hit: at most %d requests per period, got %d (use gcra or sliding_window)",
			ErrInvalidLimit, MaxSlidingLogRequests, l.Requests)
	}
	return nil
}

// MaxSlidingLogRequests bounds a sliding_log limit: its state holds one
// timestamp per admitted hit (about 120 bytes each in a Redis sorted set
// past 128 members), and one decision may add that many at once, blocking
// Redis while it does.
const MaxSlidingLogRequests = 10_000

// valid reports whether Validate would return nil. Validate's error
// formatting keeps it from being inlined; this check is, and runs on every
// decision.
func (l *Limit) valid() bool {
	return l.Requests >= 1 && l.Burst >= 0 && l.Period >= time.Millisecond &&
		l.Period%time.Millisecond == 0 && l.Algorithm.Valid() &&
		(l.Algorithm != SlidingLog || l.Requests <= MaxSlidingLogRequests && l.Consistency != Allotment) &&
		l.Consistency.Valid()
}

// Result is the outcome of one limit for one request.
type Result struct {
	// Allowed is true when the hits were admitted by this limit (for a
	// ChargeAlways request: when the state after the charge is within it).
	Allowed bool
	// Limit is the quota reported to clients: Requests (Burst for GCRA when larger).
	Limit int64
	// Remaining is how many more hits would be admitted right now.
	Remaining int64
	// ResetAfter is the time until the state is back to empty (window end,
	// or a full bucket).
	ResetAfter time.Duration
	// RetryAfter is, when not allowed, the time until the same hits could be
	// admitted (for a ChargeAlways request: until one hit could be); zero
	// when allowed.
	RetryAfter time.Duration
}

// Request is one decision over one key: every limit in Limits must admit
// Hits, or none of them is charged (unless Charge says otherwise).
type Request struct {
	// Key identifies the caller; build it with Key.
	Key string
	// Limits all apply to Key; at least one, no two with the same
	// algorithm and period.
	Limits []Limit
	// Hits is the cost of the request; 0 checks without consuming. It may
	// be negative (a refund) only when Charge is ChargeAlways.
	Hits int64
	// Charge says when Hits are charged; the zero value is
	// ChargeIfAdmitted, the all-or-none charge described above.
	Charge ChargeMode
	// Lease, when its Holder is set, marks the charge of an allotment
	// lease (package allotment) of one limit. A store that can be reset
	// while leases are outstanding records what the holder may still use
	// of that limit, so that its Reset keeps those tokens charged; other
	// stores ignore it.
	Lease Lease
}

// ChargeMode says when a Request's Hits are charged.
type ChargeMode uint8

// The charge modes. The zero value is ChargeIfAdmitted.
const (
	// ChargeIfAdmitted charges Hits only when every limit admits them (the
	// default).
	ChargeIfAdmitted ChargeMode = iota
	// ChargeNever decides as if charging Hits and writes nothing: the check
	// of a budget whose charge comes later (Hits 1: "is anything left?").
	ChargeNever
	// ChargeAlways charges Hits to every limit whatever it decides: a cost
	// known only after the request ran. Negative Hits refund, never below
	// the empty state. Result.Allowed says whether the state after the
	// charge is within the limit; Remaining is what is left after it (0 when
	// over); RetryAfter, when over, the time until one hit would be
	// admitted again. See docs/algorithms.md for each algorithm.
	ChargeAlways
	// ChargeReserve decides admission on one hit ("is one hit left?", as
	// ChargeNever with Hits 1 would) and charges an admitted request its
	// full Hits whatever the limit says, in the same step: a reservation
	// taken with its check, so that no request in flight passes a check
	// another one has already spent. It may leave the state over the
	// limit by that one reservation. A refused request charges nothing.
	// Every limit of the request must admit its one hit (all or none, as
	// ChargeIfAdmitted). An admitted Result is Allowed with the state
	// after the charge (Remaining 0 when over, RetryAfter 0); a refused
	// one is the one-hit check's.
	ChargeReserve
)

// Valid reports whether m names a charge mode.
func (m ChargeMode) Valid() bool { return m <= ChargeReserve }

// String returns m's name, as docs and metrics spell it.
func (m ChargeMode) String() string {
	switch m {
	case ChargeIfAdmitted:
		return "if_admitted"
	case ChargeNever:
		return "never"
	case ChargeAlways:
		return "always"
	case ChargeReserve:
		return "reserve"
	}
	return fmt.Sprintf("ChargeMode(%d)", uint8(m))
}

// CheckCharge reports what is wrong with charging hits in mode m, or nil:
// an unknown mode, or negative hits outside ChargeAlways. Both wrap
// ErrInvalidHits (how to charge is part of the hits' meaning), so every
// wrapper that tells a caller's mistake from a store failure by that
// sentinel keeps doing so.
func CheckCharge(hits int64, m ChargeMode) error {
	switch {
	case !m.Valid():
		return fmt.Errorf("%w: unknown charge mode %d", ErrInvalidHits, uint8(m))
	case hits < 0 && m != ChargeAlways:
		return fmt.Errorf("%w: %d is negative (only ChargeAlways refunds)", ErrInvalidHits, hits)
	}
	return nil
}

// Lease describes who charges a Request to lease tokens, and what it
// still holds of earlier leases of the same limit.
type Lease struct {
	// Holder names one slice of one replica; empty: not a lease.
	Holder string
	// Held is the tokens of earlier leases the holder may still use when
	// it sends this one: the store records Held + Hits for it.
	Held int64
}

// Decision is the outcome of one Request.
type Decision struct {
	// Allowed is true when every limit admitted the hits (and all were charged).
	Allowed bool
	// Results holds one Result per Request.Limits, in the same order.
	Results []Result
}

// Store decides requests against shared state. Implementations are safe for
// concurrent use. Errors are backend failures only, never "over limit".
type Store interface {
	// Allow decides one limit for one key.
	Allow(ctx context.Context, key string, limit Limit, hits int64) (Result, error)
	// AllowBatch decides independent requests at once, in one round trip
	// per backend node; the i-th Decision answers reqs[i].
	AllowBatch(ctx context.Context, reqs []Request) ([]Decision, error)
	// Close releases the store's resources; it is safe to call twice.
	Close() error
}

// Errors callers branch on.
var (
	// ErrInvalidLimit means a Limit failed validation.
	ErrInvalidLimit = errors.New("invalid limit")
	// ErrInvalidHits means a negative hit count outside ChargeAlways, or
	// an unknown ChargeMode.
	ErrInvalidHits = errors.New("invalid hits")
	// ErrClosed means the store was used after Close.
	ErrClosed = errors.New("store closed")
	// ErrNotResettable means a store, or one it wraps, is no Resetter.
	ErrNotResettable = errors.New("store cannot be reset")
)

// Batcher is the batch half of Store.
type Batcher interface {
	AllowBatch(ctx context.Context, reqs []Request) ([]Decision, error)
}

// AllowOne decides one limit for one key through b's AllowBatch: the Allow
// of stores whose only decision path is the batch.
func AllowOne(ctx context.Context, b Batcher, key string, limit Limit, hits int64) (Result, error) {
	d, err := b.AllowBatch(ctx, []Request{{Key: key, Limits: []Limit{limit}, Hits: hits}})
	if err != nil {
		return Result{}, err
	}
	return d[0].Results[0], nil
}

// Resetter is a Store that operators can inspect and reset (the admin API).
// Reading a state needs no method of its own: a Request with Hits 0 is
// decided without charging or writing anything.
type Resetter interface {
	// StateKeys names where each limit of r is kept, in the order of
	// r.Limits (for Redis, the key of the limit's state).
	StateKeys(r Request) []string
	// Reset forgets the state of every limit of every request (Hits is
	// ignored): the next decision finds each limit empty.
	Reset(ctx context.Context, reqs []Request) error
}
