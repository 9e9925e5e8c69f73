package policy

import (
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// units are envoyproxy/ratelimit's rate_limit.unit values (case-insensitive
// there too); a month is 30 days and a year 365, as it counts them.
var units = map[string]time.Duration{
	"second": time.Second,
	"minute": time.Minute,
	"hour":   time.Hour,
	"day":    24 * time.Hour,
	"week":   7 * 24 * time.Hour,
	"month":  30 * 24 * time.Hour,
	"year":   365 * 24 * time.Hour,
}

// limitPlace says where a limit is written, which decides the fields it may use.
type limitPlace int

const (
	inRateLimit  limitPlace = iota // a descriptor's rate_limit: everything
	inRateLimits                   // an item of a descriptor's rate_limits: no unlimited
	inRoute                        // an item of an HTTP route's rate_limits: no unlimited, no replaces
)

// ref is a name written somewhere in a file, kept to report it later.
type ref struct {
	name string
	path string
	line int
}

// limitSpec is a parsed limit before it joins a rule.
type limitSpec struct {
	limit     ratelimit.Limit
	unlimited bool
	blocked   bool // requests_per_unit: 0
	replaces  []ref
	charge    *Charge // set for a charged limit (inRoute only)
	// chargeOver is charge_over_limit (see Rule.ChargeOverLimit).
	chargeOver bool
	ok         bool // no problem was found in it
}

// charged returns s as a ChargedLimit; nil when it is a counted limit.
func (s limitSpec) charged() *ChargedLimit {
	if s.charge == nil {
		return nil
	}
	return &ChargedLimit{Limit: s.limit, Charge: *s.charge}
}

// limit parses and validates one limit mapping.
func (d *decoder) limit(f field, place limitPlace) limitSpec {
	before := len(*d.probs)
	var spec limitSpec
	kvs := map[string]field{} // the fields validated together below
	for _, kv := range d.fields(f.node, f.path) {
		switch kv.key {
		case "unit", "requests_per_unit", "period", "algorithm", "burst", "consistency", "scope", "floor":
			kvs[kv.key] = kv
		case "name":
			spec.limit.Name = d.str(kv)
		case "unlimited":
			d.placeAllows(kv, place != inRateLimit, "unlimited is only allowed in rate_limit")
			spec.unlimited = d.boolean(kv)
		case "replaces":
			d.placeAllows(kv, place == inRoute, "replaces is only allowed in descriptors")
			spec.replaces = d.replaces(kv)
		case "charge_over_limit":
			d.placeAllows(kv, place == inRoute,
				"charge_over_limit is only allowed in descriptors (an HTTP route's limit takes charge)")
			kvs[kv.key] = kv // only to report it beside unlimited
			spec.chargeOver = d.boolean(kv)
		case "charge":
			d.placeAllows(kv, place != inRoute, "charge is only allowed in an HTTP route's (or tier's) rate_limits")
			spec.charge = d.charge(kv)
		default:
			d.unknown(kv)
		}
	}
	if spec.unlimited {
		for _, k := range []string{"unit", "period", "requests_per_unit", "algorithm", "burst", "consistency", "scope", "floor", "charge_over_limit"} {
			if kv, ok := kvs[k]; ok {
				d.problem(kv.line, kv.path, "must not be set when unlimited is true")
			}
		}
	} else {
		alg := ratelimit.GCRA
		if place != inRoute {
			alg = d.descAlg
		}
		spec.blocked = d.fillLimit(f, kvs, &spec.limit, place == inRateLimit, alg)
	}
	if spec.charge != nil {
		d.checkCharged(f, spec)
	}
	spec.ok = len(*d.probs) == before
	return spec
}

func (d *decoder) placeAllows(kv field, forbidden bool, msg string) {
	if forbidden {
		d.problem(kv.line, kv.path, "%s", msg)
	}
}

// fillLimit turns the limit fields into l, reporting each bad one; def is
// the algorithm when none is written. Where mayBlock, requests_per_unit: 0
// is accepted as a block-all rule (as in envoyproxy/ratelimit) and reported
// by the returned flag.
func (d *decoder) fillLimit(f field, kvs map[string]field, l *ratelimit.Limit, mayBlock bool, def ratelimit.Algorithm) (blocked bool) {
	unit, hasUnit := kvs["unit"]
	period, hasPeriod := kvs["period"]
	switch {
	case hasUnit && hasPeriod:
		d.problem(period.line, period.path, "unit and period are mutually exclusive; set one")
	case hasUnit:
		l.Period = d.unit(unit)
	case hasPeriod:
		l.Period = d.period(period)
	default:
		d.problem(f.line, joinPath(f.path, "unit"), "a unit or a period is required")
	}
	if rpu, ok := kvs["requests_per_unit"]; !ok {
		d.problem(f.line, joinPath(f.path, "requests_per_unit"), "is required")
	} else if l.Requests = d.integer(rpu); l.Requests == 0 && mayBlock {
		blocked = true
	} else if l.Requests < 1 {
		d.problem(rpu.line, rpu.path,
			"must be at least 1, got %d (0 blocks all requests only in a descriptor's rate_limit)", l.Requests)
	}
	l.Algorithm = def
	if alg, ok := kvs["algorithm"]; ok {
		l.Algorithm = ratelimit.Algorithm(strings.ToLower(d.str(alg)))
		if !l.Algorithm.Valid() || l.Algorithm == "" {
			d.problem(alg.line, alg.path,
				"unknown algorithm %s (want gcra, sliding_log, sliding_window or fixed_window)", describe(alg.node))
			l.Algorithm = ratelimit.GCRA
		}
	}
	if burst, ok := kvs["burst"]; ok {
		d.burst(burst, l)
	}
	if c, ok := kvs["consistency"]; ok && !d.consistency(c, l) {
		return blocked // reported; Validate would repeat it without the field
	}
	if !d.scope(kvs, l) {
		return blocked
	}
	if l.Period > 0 && l.Requests > 0 {
		if err := l.Validate(); err != nil {
			d.problem(f.line, f.path, "%v", err)
		}
	}
	return blocked
}

func (d *decoder) burst(f field, l *ratelimit.Limit) {
	l.Burst = d.integer(f)
	switch {
	case l.Burst < 0:
		d.problem(f.line, f.path, "must not be negative, got %d", l.Burst)
		l.Burst = 0
	case l.Burst > 0 && l.Algorithm != ratelimit.GCRA:
		d.problem(f.line, f.path, "applies to the gcra algorithm only, not %s", l.Algorithm)
	}
}

// consistency reads `consistency: exact | allotment` into l, reporting an
// unknown mode and allotment on sliding_log at the field itself.
func (d *decoder) consistency(f field, l *ratelimit.Limit) bool {
	l.Consistency = ratelimit.Consistency(strings.ToLower(d.str(f)))
	switch {
	case !l.Consistency.Valid() || l.Consistency == "":
		d.problem(f.line, f.path, "unknown consistency %s (want exact or allotment)", describe(f.node))
	case l.Consistency == ratelimit.Allotment && l.Algorithm == ratelimit.SlidingLog:
		d.problem(f.line, f.path, "sliding_log cannot use allotment: its state is each admission's instant, and a leased "+
			"hit would be counted at the lease's instant, not its use's (use gcra, fixed_window or sliding_window)")
	default:
		return true
	}
	l.Consistency = ""
	return false
}

// scope reads `scope: region | global` and `floor` into l, reporting each
// bad one at the field itself.
func (d *decoder) scope(kvs map[string]field, l *ratelimit.Limit) bool {
	sc, hasScope := kvs["scope"]
	if hasScope {
		l.Scope = ratelimit.Scope(strings.ToLower(d.str(sc)))
		switch {
		case !l.Scope.Valid() || l.Scope == "":
			d.problem(sc.line, sc.path, "unknown scope %s (want region or global)", describe(sc.node))
			l.Scope = ""
			return false
		case l.Scope == ratelimit.Global && l.Algorithm != ratelimit.FixedWindow:
			d.problem(sc.line, sc.path, "scope global needs algorithm: fixed_window (a region's share of the limit is a budget per window)")
			l.Scope = ""
			return false
		case l.Scope == ratelimit.Global && l.Consistency == ratelimit.Allotment:
			d.problem(sc.line, sc.path, "scope global cannot be combined with consistency: allotment")
			l.Scope = ""
			return false
		}
	}
	fl, hasFloor := kvs["floor"]
	if !hasFloor {
		return true
	}
	if l.Scope != ratelimit.Global {
		d.problem(fl.line, fl.path, "floor applies to scope: global only")
		return false
	}
	var v float64
	if err := fl.node.Decode(&v); err != nil || v != v || v < 0 || v > 1 {
		d.problem(fl.line, fl.path, "must be a fraction in [0, 1], got %s", describe(fl.node))
		return false
	}
	l.Floor = v
	return true
}

func (d *decoder) unit(f field) time.Duration {
	u := d.str(f)
	if p, ok := units[strings.ToLower(u)]; ok {
		return p
	}
	d.problem(f.line, f.path, "unknown unit %s (want second, minute, hour, day, week, month or year)", describe(f.node))
	return 0
}

func (d *decoder) period(f field) time.Duration {
	s := d.str(f)
	p, err := time.ParseDuration(s)
	switch {
	case err != nil:
		d.problem(f.line, f.path, "bad duration %s (want e.g. 10s, 15m, 1h)", describe(f.node))
	case p < time.Millisecond || p%time.Millisecond != 0:
		d.problem(f.line, f.path, "must be a whole number of milliseconds, at least 1ms, got %s", s)
	default:
		return p
	}
	return 0
}

// replaces reads `replaces: [{name: ...}]`.
func (d *decoder) replaces(f field) []ref {
	var out []ref
	for _, item := range d.items(f) {
		var r ref
		for _, kv := range d.fields(item.node, item.path) {
			if kv.key != "name" {
				d.unknown(kv)
				continue
			}
			r = ref{name: d.str(kv), path: kv.path, line: kv.line}
		}
		if r.name == "" {
			d.problem(item.line, joinPath(item.path, "name"), "is required")
			continue
		}
		out = append(out, r)
	}
	return out
}

// limitList parses a rate_limits list: at least one limit, no two counted
// limits with the same algorithm and period (they would share state), no two
// charged limits with the same name (it keys their state).
func (d *decoder) limitList(f field, place limitPlace) []limitSpec {
	items := d.items(f)
	if len(items) == 0 && f.node.Kind == yaml.SequenceNode {
		d.problem(f.line, f.path, "must hold at least one limit")
	}
	var out []limitSpec
	seen := map[string]string{}
	for _, item := range items {
		s := d.limit(item, place)
		out = append(out, s)
		if !s.ok {
			continue
		}
		if s.charge != nil {
			d.uniqueCharged(item, s.limit.Name, seen)
			continue
		}
		k := string(s.limit.Algorithm) + "/" + s.limit.Period.String()
		if first, dup := seen[k]; dup {
			d.problem(item.line, item.path, "same algorithm and period as %s; merge them or change one", first)
			continue
		}
		seen[k] = item.path
	}
	return out
}
