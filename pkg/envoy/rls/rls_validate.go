package rls

import (
	"fmt"
	"math"
	"time"

	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/extauthz/extauthz/pkg/envoy"
)

// Bounds on one ShouldRateLimit request. Envoy sends one descriptor per
// matching route rate_limits entry and one entry per action, so real
// requests are far below these; the bounds keep a hostile or broken caller
// from making one call cost unbounded work, keys or metric series.
//
// A request past a bound is never an error (Envoy's ratelimit filter fails
// open on errors, so an error would admit the whole request): the
// descriptors within the bounds are decided as usual and every descriptor
// past one is answered OVER_LIMIT without being counted (OutcomeRejected).
// Only the shape of Envoy's configuration, or a caller that is not Envoy,
// reaches the descriptor and entry bounds; the byte bound can be reached by
// a client that controls a header used as a descriptor value, and then only
// its own request is denied.
const (
	// MaxDescriptors is the most descriptors of one request decided; the
	// rest are rejected.
	MaxDescriptors = 64
	// MaxEntries is the most entries a decided descriptor may carry; a
	// descriptor with more is rejected.
	MaxEntries = 16
	// MaxRequestBytes bounds the sum of the entry keys and values of the
	// decided descriptors; the descriptor that crosses it and those after
	// it are rejected. Values of any length below it are decided (keys hash
	// long parts).
	MaxRequestBytes = 1 << 20
	// MaxHitsAddend is the largest hits_addend charged; a descriptor asking
	// more is charged MaxHitsAddend (more than any limit holds, so it is
	// denied). 64 descriptors of at most 2^32-1 hits each sum within int64.
	MaxHitsAddend = math.MaxUint32
	// MaxOverridePeriod bounds the period of a descriptor's limit override;
	// a longer one is clamped to it.
	MaxOverridePeriod = 10 * 365 * 24 * time.Hour
)

// Reasons, the "reason" label of extauthz_invalid_requests_total for the
// RLS: request parts that were decided by one of the rules above rather
// than as they came.
const (
	reasonNoDescriptors = "no_descriptors"
	reasonDescriptors   = "descriptors"
	reasonEntries       = "entries"
	reasonBytes         = "request_bytes"
	reasonNoEntries     = "no_entries"
	reasonEmptyKey      = "empty_key"
	reasonHits          = "hits_addend"
	reasonOverride      = "limit_override"
)

// anomaly is one request part decided by a fallback rule.
type anomaly struct {
	index  int // descriptor index, -1 for the request
	reason string
}

// screen sets, per descriptor, the outcome fixed before matching ("" for
// a descriptor that is planned normally) in outcomes, one per descriptor,
// and returns the anomalies to report. The caller gives outcomes, which
// lives no longer than the call: on its stack for a few descriptors.
func screen(req *rlsv3.RateLimitRequest, outcomes []string) []anomaly {
	descs := req.GetDescriptors()
	var found []anomaly
	if len(descs) == 0 {
		found = append(found, anomaly{-1, reasonNoDescriptors})
	}
	total := 0
	for i, d := range descs {
		entries := d.GetEntries()
		for _, e := range entries {
			total += len(e.GetKey()) + len(e.GetValue())
		}
		var reason string
		outcomes[i], reason = screenDescriptor(i, d, total)
		if reason != "" {
			found = append(found, anomaly{i, reason})
		}
		if reason = softAnomaly(d); reason != "" && outcomes[i] == "" {
			found = append(found, anomaly{i, reason})
		}
	}
	return found
}

// screenDescriptor fixes the outcome of a descriptor that cannot be planned:
// past a bound, rejected; no entries (nothing to match), no_match.
func screenDescriptor(i int, d *commonrlv3.RateLimitDescriptor, total int) (outcome, reason string) {
	switch {
	case i >= MaxDescriptors:
		return envoy.OutcomeRejected, reasonDescriptors
	case len(d.GetEntries()) > MaxEntries:
		return envoy.OutcomeRejected, reasonEntries
	case total > MaxRequestBytes:
		return envoy.OutcomeRejected, reasonBytes
	case len(d.GetEntries()) == 0:
		return envoy.OutcomeNoMatch, reasonNoEntries
	}
	return "", ""
}

// softAnomaly names a part of a planned descriptor that the plan reads by a
// fallback rule: an empty entry key (matched as it is: no rule has one), a
// hits_addend over MaxHitsAddend (clamped), an override that is not a
// valid limit (see overrideLimit).
func softAnomaly(d *commonrlv3.RateLimitDescriptor) string {
	for _, e := range d.GetEntries() {
		if e.GetKey() == "" {
			return reasonEmptyKey
		}
	}
	if d.GetHitsAddend().GetValue() > MaxHitsAddend {
		return reasonHits
	}
	if o := d.GetLimit(); o != nil {
		if _, exact := overrideLimit(o); !exact {
			return reasonOverride
		}
	}
	return ""
}

// descriptorHits is what one descriptor is charged: its own hits_addend
// (0 checks without charging) clamped to MaxHitsAddend, else the request's.
func descriptorHits(d *commonrlv3.RateLimitDescriptor, requestHits int64) int64 {
	if w := d.GetHitsAddend(); w != nil {
		return int64(min(w.GetValue(), MaxHitsAddend))
	}
	return requestHits
}

// unitDurations are the lengths of Envoy's rate-limit units, as
// envoyproxy/ratelimit counts them (a month is 30 days, a year 365).
var unitDurations = map[typev3.RateLimitUnit]time.Duration{
	typev3.RateLimitUnit_SECOND: time.Second,
	typev3.RateLimitUnit_MINUTE: time.Minute,
	typev3.RateLimitUnit_HOUR:   time.Hour,
	typev3.RateLimitUnit_DAY:    24 * time.Hour,
	typev3.RateLimitUnit_MONTH:  30 * 24 * time.Hour,
	typev3.RateLimitUnit_YEAR:   365 * 24 * time.Hour,
}

// overrideTerms is what a limit override is read as.
type overrideTerms struct {
	// use is false when the override is ignored (its unit is not a known
	// time unit): the descriptor is then decided under the policy.
	use      bool
	requests int64 // 0 blocks every request, as requests_per_unit: 0 does in a rule
	period   time.Duration
}

// overrideLimit reads a limit override. exact is false when a fallback
// applied: an unknown unit (ignored), or a period past MaxOverridePeriod
// (clamped). requests_per_unit 0 is read as a block, like a rule's.
func overrideLimit(o *commonrlv3.RateLimitDescriptor_RateLimitOverride) (t overrideTerms, exact bool) {
	unit, ok := unitDurations[o.GetUnit()]
	if !ok {
		return overrideTerms{}, false
	}
	mult := int64(1)
	if o.GetUnitMultiplier() != nil && o.GetUnitMultiplier().GetValue() > 0 {
		mult = int64(o.GetUnitMultiplier().GetValue())
	}
	t = overrideTerms{use: true, requests: int64(o.GetRequestsPerUnit()), period: MaxOverridePeriod}
	exact = mult <= int64(MaxOverridePeriod/unit)
	if exact {
		t.period = time.Duration(mult) * unit
	}
	return t, exact
}

// describeAnomaly is the log text of one anomaly; it never holds request
// bytes (values may be API keys or other credentials).
func describeAnomaly(a anomaly, req *rlsv3.RateLimitRequest) string {
	if a.index < 0 {
		return fmt.Sprintf("%d descriptors", len(req.GetDescriptors()))
	}
	d := req.GetDescriptors()[a.index]
	n := 0
	for _, e := range d.GetEntries() {
		n += len(e.GetKey()) + len(e.GetValue())
	}
	return fmt.Sprintf("descriptor %d of %d: %d entries, %d bytes",
		a.index, len(req.GetDescriptors()), len(d.GetEntries()), n)
}
