package envoy

import (
	"fmt"
	"math"
	"time"

	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// Bounds on one ShouldRateLimit request. Envoy sends one descriptor per
// matching route rate_limits entry and one entry per action, so real
// requests are far below these; the bounds keep a hostile or broken caller
// from making one call cost unbounded work, keys or metric series.
const (
	// MaxDescriptors is the most descriptors one request may carry.
	MaxDescriptors = 64
	// MaxEntries is the most entries one descriptor may carry.
	MaxEntries = 16
	// MaxEntryBytes bounds the domain and each entry key and value, in bytes.
	MaxEntryBytes = 1024
	// MaxHitsAddend bounds a descriptor's hits_addend (the request-level
	// field is a uint32 already): 64 descriptors of at most 2^32-1 hits
	// each always sum within int64.
	MaxHitsAddend = math.MaxUint32
	// MaxOverridePeriod bounds the period of a descriptor's limit override.
	MaxOverridePeriod = 10 * 365 * 24 * time.Hour
)

// Reasons, the "reason" label of extauthz_invalid_requests_total for the RLS.
const (
	reasonDomain      = "domain"
	reasonDescriptors = "descriptors"
	reasonEntries     = "entries"
	reasonHits        = "hits_addend"
	reasonOverride    = "limit_override"
)

// invalidRequest is a request that breaks one of the rules above.
type invalidRequest struct {
	reason string
	msg    string
}

func (e *invalidRequest) Error() string { return e.msg }

func invalid(reason, format string, args ...any) *invalidRequest {
	return &invalidRequest{reason: reason, msg: fmt.Sprintf(format, args...)}
}

// validateRLS returns the first problem of req, or nil.
func validateRLS(req *rlsv3.RateLimitRequest) *invalidRequest {
	switch {
	case req == nil:
		return invalid(reasonDescriptors, "empty request")
	case req.GetDomain() == "":
		return invalid(reasonDomain, "domain must not be empty")
	case len(req.GetDomain()) > MaxEntryBytes:
		return invalid(reasonDomain, "domain is %d bytes, more than %d", len(req.GetDomain()), MaxEntryBytes)
	case len(req.GetDescriptors()) == 0:
		return invalid(reasonDescriptors, "descriptors must not be empty")
	case len(req.GetDescriptors()) > MaxDescriptors:
		return invalid(reasonDescriptors, "%d descriptors, more than %d", len(req.GetDescriptors()), MaxDescriptors)
	}
	for i, d := range req.GetDescriptors() {
		if err := validateDescriptor(i, d); err != nil {
			return err
		}
	}
	return nil
}

func validateDescriptor(i int, d *commonrlv3.RateLimitDescriptor) *invalidRequest {
	entries := d.GetEntries()
	switch {
	case len(entries) == 0:
		return invalid(reasonEntries, "descriptors[%d] has no entries", i)
	case len(entries) > MaxEntries:
		return invalid(reasonEntries, "descriptors[%d] has %d entries, more than %d", i, len(entries), MaxEntries)
	case d.GetIsNegativeHits():
		return invalid(reasonHits, "descriptors[%d].is_negative_hits: refunds are not supported", i)
	case d.GetHitsAddend() != nil && d.GetHitsAddend().GetValue() > MaxHitsAddend:
		return invalid(reasonHits, "descriptors[%d].hits_addend is %d, more than %d",
			i, d.GetHitsAddend().GetValue(), uint64(MaxHitsAddend))
	}
	for j, e := range entries {
		switch {
		case e.GetKey() == "":
			return invalid(reasonEntries, "descriptors[%d].entries[%d].key must not be empty", i, j)
		case len(e.GetKey()) > MaxEntryBytes:
			return invalid(reasonEntries, "descriptors[%d].entries[%d].key is %d bytes, more than %d",
				i, j, len(e.GetKey()), MaxEntryBytes)
		case len(e.GetValue()) > MaxEntryBytes:
			return invalid(reasonEntries, "descriptors[%d].entries[%d].value is %d bytes, more than %d",
				i, j, len(e.GetValue()), MaxEntryBytes)
		}
	}
	if o := d.GetLimit(); o != nil {
		if _, err := overridePeriod(o); err != nil {
			return invalid(reasonOverride, "descriptors[%d].limit: %s", i, err)
		}
	}
	return nil
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

// overridePeriod checks a limit override and returns its period.
func overridePeriod(o *commonrlv3.RateLimitDescriptor_RateLimitOverride) (time.Duration, error) {
	unit, ok := unitDurations[o.GetUnit()]
	if !ok {
		return 0, fmt.Errorf("unit %s is not a known time unit", o.GetUnit())
	}
	if o.GetRequestsPerUnit() == 0 {
		return 0, fmt.Errorf("requests_per_unit must be at least 1")
	}
	mult := int64(1)
	if o.GetUnitMultiplier() != nil && o.GetUnitMultiplier().GetValue() > 0 {
		mult = int64(o.GetUnitMultiplier().GetValue())
	}
	if mult > int64(MaxOverridePeriod/unit) {
		return 0, fmt.Errorf("unit_multiplier %d makes a period longer than %s", mult, MaxOverridePeriod)
	}
	return time.Duration(mult) * unit, nil
}
