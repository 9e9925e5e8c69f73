package quota

import (
	"context"
	"errors"
	"math"
	"time"
)

// DemandStore keeps each client's latest demand per bucket for a limited
// time, so that every replica reads the same demands and a client that stops
// reporting drops out on its own. Implementations: MemoryStore (one process)
// and package quotaredis (shared by replicas).
//
// Errors are backend failures (and ErrInvalid for empty keys), never a
// judgement on the demand: a NaN or negative demand is stored as 0.
type DemandStore interface {
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
