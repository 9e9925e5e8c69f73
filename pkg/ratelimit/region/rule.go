package region

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// ErrInvalid is wrapped by every error about a bad Rule or Topology.
var ErrInvalid = errors.New("region: invalid")

// Rule is one global limit: Limit requests per fixed window of Period,
// shared by the regions of a Topology.
type Rule struct {
	// Limit is the global number of requests per window; at least 1.
	Limit int64
	// Period is the window, a whole number of milliseconds, at least 1ms.
	Period time.Duration
	// Floor is the fraction of Limit every configured region may admit per
	// window without a grant (cut off from the global store, or before its
	// first exchange), reserved for it by the allocator. In [0, 1], and
	// Floor × len(Topology.Regions) <= 1.
	Floor float64
}

// FloorHits is the floor of r in requests per window (rounded down).
func (r Rule) FloorHits() int64 { return int64(math.Floor(r.Floor * float64(r.Limit))) }

// PeriodMS is the window in milliseconds.
func (r Rule) PeriodMS() int64 { return r.Period.Milliseconds() }

// Window is the index of the window that holds t.
func (r Rule) Window(t time.Time) int64 { return floorDiv(t.UnixMilli(), r.PeriodMS()) }

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// Validate reports what is wrong with r for regions regions, or nil.
func (r Rule) Validate(regions int) error {
	switch {
	case r.Limit < 1:
		return fmt.Errorf("%w: limit must be at least 1, got %d", ErrInvalid, r.Limit)
	case r.Period < time.Millisecond || r.Period%time.Millisecond != 0:
		return fmt.Errorf("%w: period must be a whole number of milliseconds, got %s", ErrInvalid, r.Period)
	case math.IsNaN(r.Floor) || r.Floor < 0 || r.Floor > 1:
		return fmt.Errorf("%w: floor must be in [0, 1], got %v", ErrInvalid, r.Floor)
	case r.Floor*float64(regions) > 1:
		return fmt.Errorf("%w: floor %v times %d regions exceeds the whole limit", ErrInvalid, r.Floor, regions)
	}
	return nil
}

// Topology is what every region must agree on: the regions (floors are
// reserved for each), the exchange interval and the lease.
type Topology struct {
	// Region is this region's name, one of Regions.
	Region string
	// Regions names every region that shares the limits, this one included.
	// Every region must be configured with the same list: a floor is
	// reserved only for a region the allocator knows.
	Regions []string
	// Interval is how often a region reports demand and renews grants.
	Interval time.Duration
	// Lease is how far ahead of the next window its grant is made: the
	// next window is granted once the current one has less than Lease to
	// run. At least Interval plus a WAN round trip, so a connected region
	// holds its next grant before the window turns.
	Lease time.Duration
	// Solo is the longest a key goes between exchanges while it is used
	// in this region only (its exchanges see no other region's demand and
	// no other grant above a floor): its interval doubles from Interval up
	// to Solo, and its next window's grant is still asked for as soon as it
	// can be made. A region whose demand for such a key begins waits up to
	// Solo for a share above its floor. At most Interval (0): no back-off.
	Solo time.Duration
}

// Validate reports what is wrong with t, or nil.
func (t Topology) Validate() error {
	switch {
	case t.Region == "" || !slices.Contains(t.Regions, t.Region):
		return fmt.Errorf("%w: region %q must be one of regions %q", ErrInvalid, t.Region, t.Regions)
	case t.Interval <= 0:
		return fmt.Errorf("%w: interval must be positive, got %s", ErrInvalid, t.Interval)
	case t.Lease < t.Interval:
		return fmt.Errorf("%w: lease %s must be at least the interval %s", ErrInvalid, t.Lease, t.Interval)
	case t.Solo < 0:
		return fmt.Errorf("%w: solo interval must not be negative, got %s", ErrInvalid, t.Solo)
	}
	seen := map[string]bool{}
	for _, r := range t.Regions {
		if r == "" || seen[r] || strings.ContainsAny(r, ", ") {
			return fmt.Errorf("%w: region names must be non-empty, distinct, without commas or spaces, got %q", ErrInvalid, t.Regions)
		}
		seen[r] = true
	}
	return nil
}
