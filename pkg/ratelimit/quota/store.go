package quota

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// DemandStore keeps each client's latest demand per bucket for a limited
// time, so that every replica reads the same demands and a client that stops
// reporting drops out on its own; and each client's grant (GrantStore).
// Implementations: MemoryStore (one process) and package quotaredis (shared
// by replicas).
//
// Errors are backend failures (and ErrInvalid for empty keys), never a
// judgement on the demand: a NaN or negative demand is stored as 0.
type DemandStore interface {
	GrantStore
	// Report records demand (requests per second) of clientID for
	// bucketKey, replacing the previous one, until now + the store's TTL.
	// Unknown does not replace a known demand that is still live: it only
	// extends it to now + TTL. A stream that moved to another replica
	// starts a new Meter, whose first demand is Unknown; the demand the old
	// replica measured stands until the new one has measured, so a replica
	// restart gives no client a larger share than it had.
	Report(ctx context.Context, bucketKey, clientID string, demand float64, now time.Time) error
	// Demands returns the demands of bucketKey that have not expired at
	// now, by client ID; an empty map when there are none. It may delete
	// the expired ones.
	Demands(ctx context.Context, bucketKey string, now time.Time) (map[string]float64, error)
}

// Stores that keep their own clock (Redis: its TIME, so that replicas'
// clocks cannot disagree) use it instead of the now the caller passes.

// ReportInterval is how often Envoy 1.40 reports usage, whatever the
// filter's reporting_interval says.
const ReportInterval = 5 * time.Second

// DefaultTTL is how long a reported demand counts: two report intervals. A
// client that stops reporting has dropped out within two intervals of its
// last report, and one late or lost report does not drop a live client.
const DefaultTTL = 2 * ReportInterval

// ErrInvalid means an empty bucket key or client ID.
var ErrInvalid = errors.New("quota: empty bucket key or client ID")

// CheckReport validates the arguments of Report and returns the demand to
// store: NaN and negative demands become 0 (+Inf, Unknown, is kept). For
// DemandStore implementations.
func CheckReport(bucketKey, clientID string, demand float64) (float64, error) {
	if bucketKey == "" || clientID == "" {
		return 0, ErrInvalid
	}
	if math.IsNaN(demand) || demand < 0 {
		return 0, nil
	}
	return demand, nil
}

// Grant is the rate one client of a bucket was sent.
type Grant struct {
	Bucket string  // the bucket key
	Client string  // the client ID
	Rate   float64 // requests per second; NaN and negative are 0
	// TTL is how long the client may enforce the grant without hearing
	// again: the assignment's time to live at the client.
	TTL time.Duration
	// Peer, on GrowGrant, lets the grant take over an orphan of that peer
	// (OrphanGrant) and, on OrphanGrant, names the peer the orphan is
	// left to. Empty: no takeover.
	Peer string
}

// GrantStore keeps the rate each client of a bucket was last sent, until
// the client can no longer be enforcing it, so that a share never grows
// into budget another client still holds: an allocation is computed from
// demands, but what the clients enforce is what they were sent, and a
// client that learns of a smaller share later (at its next tick), or a
// stream whose Envoy reconnected under a new client ID, still holds the old
// one. The live grants of a bucket sum to at most its budget, up to
// GrantSlack, as long as every grant that grows is recorded with GrowGrant
// before it is sent and every other one with SetGrant after.
type GrantStore interface {
	// GrowGrant records g with its Rate lowered, when needed, to what the
	// budget leaves after the other clients' live grants (never below 0),
	// and returns the rate recorded. The client's own previous grant does
	// not count against it. When g.Rate does not fit and g.Peer is set, the
	// smallest orphan of that peer (OrphanGrant) is dropped first.
	GrowGrant(ctx context.Context, g Grant, budget float64, now time.Time) (float64, error)
	// SetGrant records g as it is: for a rate no larger than the client's
	// previous grant (a decrease, or a re-send that extends it), which needs
	// no room and is recorded after it was sent.
	SetGrant(ctx context.Context, g Grant, now time.Time) error
	// OrphanGrant marks the live grant of g.Client on g.Bucket as left by a
	// client that is gone (a stream that ended) to g.Peer, keeping its rate
	// and expiry: the client behind it may still enforce it, or come back
	// under a new ID. A GrowGrant with the same Peer that does not fit
	// otherwise then takes over (drops) the smallest orphan of that peer
	// instead of waiting for it to expire: a reconnecting client's own
	// orphan is at least that large, so taking the smallest never frees
	// more than the taker gives up. No live grant, nothing done.
	OrphanGrant(ctx context.Context, g Grant, now time.Time) error
}

// GrantSlack is the rounding GrowGrant forgives: a rate that exceeds what
// the budget leaves by at most GrantSlack of the budget is granted whole,
// so that shares computed to sum to the budget are not cut by float
// rounding (quotaredis's grant.lua repeats the value: change both).
const GrantSlack = 1e-9

// CheckGrant validates a Grant for GrantStore implementations and returns
// its rate to record: NaN and negative rates become 0.
func CheckGrant(g Grant) (float64, error) {
	if g.Bucket == "" || g.Client == "" {
		return 0, ErrInvalid
	}
	if g.TTL <= 0 {
		return 0, fmt.Errorf("%w: grant TTL must be positive, got %s", ErrInvalidOptions, g.TTL)
	}
	if math.IsNaN(g.Rate) || g.Rate < 0 {
		return 0, nil
	}
	return g.Rate, nil
}

// GrowRate is the rate GrowGrant records: want, or what the budget leaves
// after others (the other clients' live grants) when want does not fit.
func GrowRate(want, budget, others float64) float64 {
	room := budget - others
	if want <= room+budget*GrantSlack {
		return want
	}
	return max(room, 0)
}
