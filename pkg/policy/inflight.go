package policy

import "time"

// DefaultInFlightTTL is a route's in_flight_ttl when it sets none: like
// lease_ttl, long enough that a renewal every third of it never misses,
// short enough that a slot lost with a crashed replica frees soon.
const DefaultInFlightTTL = 30 * time.Second

// maxInFlightCap keeps max_in_flight a plausible concurrency, not a typo.
const maxInFlightCap = 1 << 20

func (d *decoder) maxInFlight(f field) int {
	n := d.integer(f)
	if n < 1 || n > maxInFlightCap {
		d.problem(f.line, f.path, "want an integer from 1 to %d, got %s", maxInFlightCap, describe(f.node))
		return 0
	}
	return int(n)
}

func (d *decoder) inFlightTTL(f field) time.Duration {
	v, err := time.ParseDuration(d.str(f))
	if err != nil || v < time.Second {
		d.problem(f.line, f.path, "want a duration of at least 1s such as 30s, got %s", describe(f.node))
	}
	return v
}

// inFlightDefaults fills in_flight_ttl and rejects one without max_in_flight.
func (d *decoder) inFlightDefaults(r *Route, f field, has map[string]bool) {
	if has["in_flight_ttl"] && !has["max_in_flight"] {
		d.problem(f.line, joinPath(f.path, "in_flight_ttl"), "needs max_in_flight")
	}
	if r.InFlightTTL == 0 {
		r.InFlightTTL = DefaultInFlightTTL
	}
}
