package quota

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Share is one client's part of a bucket's budget.
type Share struct {
	// Demand is the client's demand as the store holds it, in requests per
	// second (Unknown for a client not measured yet).
	Demand float64
	// Rate is the client's share of the budget, in requests per second.
	Rate float64
	// Bucket is Rate as a token bucket Envoy enforces; its rate is at most
	// Rate.
	Bucket TokenBucket
}

// Config configures an Allocator. The zero value is the defaults.
type Config struct {
	// Spare says who gets the budget the demands leave unused; default
	// SpareEqual.
	Spare Spare
	// Bucket shapes the token buckets.
	Bucket BucketOptions
}

// Validate reports every problem with c.
func (c Config) Validate() error {
	var errs []error
	if !c.Spare.Valid() {
		errs = append(errs, fmt.Errorf("%w: unknown Spare policy %d", ErrInvalidOptions, c.Spare))
	}
	if err := c.Bucket.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Allocate divides budget (requests per second) among the clients of
// demands: Shares, then BucketFor each share. A pure function: the same
// inputs give the same allocation on every replica.
func Allocate(budget float64, demands map[string]float64, c Config) map[string]Share {
	rates := Shares(budget, demands, c.Spare)
	out := make(map[string]Share, len(rates))
	for id, r := range rates {
		out[id] = Share{Demand: demands[id], Rate: r, Bucket: BucketFor(r, c.Bucket)}
	}
	return out
}

// Allocator computes a bucket's allocation from the demands in a
// DemandStore. It holds no state of its own, so any replica over the same
// store computes the same allocation. Safe for concurrent use.
type Allocator struct {
	store DemandStore
	cfg   Config
}

// NewAllocator returns an Allocator over store.
func NewAllocator(store DemandStore, c Config) (*Allocator, error) {
	if store == nil {
		return nil, errors.New("quota: nil DemandStore")
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &Allocator{store: store, cfg: c}, nil
}

// Report records clientID's demand for bucketKey (see DemandStore.Report).
func (a *Allocator) Report(ctx context.Context, bucketKey, clientID string, demand float64, now time.Time) error {
	return a.store.Report(ctx, bucketKey, clientID, demand, now)
}

// Allocate reads the live demands of bucketKey and divides budget (requests
// per second) among those clients. A client whose report has expired is not
// in the result: it has no share. The error is the store's.
func (a *Allocator) Allocate(ctx context.Context, bucketKey string, budget float64, now time.Time) (map[string]Share, error) {
	demands, err := a.store.Demands(ctx, bucketKey, now)
	if err != nil {
		return nil, fmt.Errorf("quota: demands of %q: %w", bucketKey, err)
	}
	return Allocate(budget, demands, a.cfg), nil
}

// Demands reads the live demands of bucketKey (requests per second; Unknown
// for a client not measured yet): Allocate in two steps, for a caller whose
// budget depends on them.
func (a *Allocator) Demands(ctx context.Context, bucketKey string, now time.Time) (map[string]float64, error) {
	demands, err := a.store.Demands(ctx, bucketKey, now)
	if err != nil {
		return nil, fmt.Errorf("quota: demands of %q: %w", bucketKey, err)
	}
	return demands, nil
}

// Divide divides budget (requests per second) among demands as Allocate
// does, with the allocator's configuration.
func (a *Allocator) Divide(budget float64, demands map[string]float64) map[string]Share {
	return Allocate(budget, demands, a.cfg)
}

// Burst is how long the allocator's token buckets hold: a client may admit
// its share × Burst at once on top of its rate.
func (a *Allocator) Burst() time.Duration { return a.cfg.Bucket.withDefaults().Burst }

// GrowGrant records want as a grant (GrantStore.GrowGrant; g.Rate is
// want's rate) and returns what the client may be sent: want when it fits
// in what the budget leaves after the other clients' live grants, else the
// token bucket of what is left (DenyAll when nothing is). Call it before
// sending a share larger than the client's last one.
func (a *Allocator) GrowGrant(ctx context.Context, g Grant, want TokenBucket, budget float64, now time.Time) (TokenBucket, error) {
	g.Rate = want.Rate()
	r, err := a.store.GrowGrant(ctx, g, budget, now)
	if err != nil {
		return TokenBucket{}, fmt.Errorf("quota: grant of %q: %w", g.Bucket, err)
	}
	if r >= g.Rate {
		return want, nil
	}
	return BucketFor(r, a.cfg.Bucket), nil
}

// SetGrant records g as it is (GrantStore.SetGrant): after sending a share
// no larger than the client's last one.
func (a *Allocator) SetGrant(ctx context.Context, g Grant, now time.Time) error {
	if err := a.store.SetGrant(ctx, g, now); err != nil {
		return fmt.Errorf("quota: grant of %q: %w", g.Bucket, err)
	}
	return nil
}

// OrphanGrant leaves a gone client's grant to its peer
// (GrantStore.OrphanGrant): call it when a client's stream ends.
func (a *Allocator) OrphanGrant(ctx context.Context, g Grant, now time.Time) error {
	if err := a.store.OrphanGrant(ctx, g, now); err != nil {
		return fmt.Errorf("quota: orphan grant of %q: %w", g.Bucket, err)
	}
	return nil
}

// RateOf converts a limit of requests per period to requests per second, the
// unit of budgets; 0 when period is not positive.
func RateOf(requests int64, period time.Duration) float64 {
	if period <= 0 || requests <= 0 {
		return 0
	}
	return float64(requests) / period.Seconds()
}
