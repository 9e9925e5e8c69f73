// Package policy loads, validates and serves the limits and idempotency
// settings that extauthz enforces.
//
// A policy is a file or a directory of YAML files. Each file is either in the
// format of envoyproxy/ratelimit (a domain and nested descriptors), accepted
// unchanged, with our additive fields (algorithm, burst, period, several
// limits on one descriptor), or carries an `http` section: the routes,
// tenant source, limits, exemptions and idempotency settings that the
// ext_authz and ext_proc servers apply. It knows nothing of Envoy.
package policy

import (
	"regexp"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// Policy is one validated, immutable snapshot of every loaded file.
type Policy struct {
	// Domains holds the descriptor trees by domain name.
	Domains map[string]*Domain
	// HTTP is the ext_authz / ext_proc policy; nil when no file has one.
	HTTP *HTTP
	// Files lists the files the snapshot was loaded from, sorted.
	Files []string

	// digest identifies the loaded bytes, so a reload of unchanged files
	// is not announced as a new policy.
	digest [32]byte
}

// Domain returns the named domain, or nil when p (or the domain) is absent.
func (p *Policy) Domain(name string) *Domain {
	if p == nil {
		return nil
	}
	return p.Domains[name]
}

// Domain is the descriptor tree of one domain.
type Domain struct {
	// Name is the domain Envoy's ratelimit filter sends.
	Name string
	// File is where the domain was defined.
	File string
	// HeaderStyle is the file's header_style: the rate-limit header fields
	// of the domain's RLS answers (zero: HeaderStyleIETF).
	HeaderStyle HeaderStyle

	root *node
}

// Rule is what a matched descriptor is limited by.
type Rule struct {
	// ID is a stable name for metrics: the domain and the configured
	// key/value path, e.g. "api.tenant.route_/orders" (a key-only level has
	// no value; request values appear only in Match.MetricID, on request).
	ID string
	// Name is rate_limit.name, the handle `replaces` refers to; optional.
	Name string
	// Limits all apply and must all admit; empty when Unlimited.
	Limits []ratelimit.Limit
	// Unlimited rules match but are never counted.
	Unlimited bool
	// Blocked rules (requests_per_unit: 0, envoyproxy/ratelimit's way to
	// block a value) deny every request without counting; Limits then holds
	// the one zero-request limit, for reporting only.
	Blocked bool
	// ShadowMode rules are counted, but an over-limit result is answered OK.
	ShadowMode bool
	// ChargeOverLimit (rate_limit.charge_over_limit) charges the rule's hits
	// even when they take it over its limit, as envoyproxy/ratelimit counts
	// them: a cost reported after the request ran (Envoy's
	// apply_on_stream_done with a hits_addend) must land whatever is left.
	// A hits_addend of 0 then checks that something is left, without
	// charging. See the RLS server for how requests map to charge modes.
	ChargeOverLimit bool
	// Replaces names the rules this one drops from the same request.
	Replaces []string
	// DetailedMetric puts the descriptor's values into metric labels.
	DetailedMetric bool
	// ShareThreshold makes all values matching a wildcard share one counter.
	ShareThreshold bool
	// QuotaMode rules (envoyproxy/ratelimit's quota_mode) deny a request
	// only when every quota-mode descriptor of it is over its limit; one
	// over-limit quota descriptor among others with room is reported
	// OVER_LIMIT in its own status but does not deny.
	QuotaMode bool
	// Metadata is the descriptor's `metadata` mapping (JSON-like values:
	// string, float64, bool, nil, []any, map[string]any), returned in the
	// RLS response's dynamic metadata when that is enabled. Read-only.
	Metadata map[string]any
}

// Named reports whether name is the rule's Name or the name of one of its
// limits: `replaces` may name either, and drops the whole rule.
func (r *Rule) Named(name string) bool {
	if r == nil || name == "" {
		return false
	}
	if r.Name == name {
		return true
	}
	for _, l := range r.Limits {
		if l.Name == name {
			return true
		}
	}
	return false
}

// Match is the result of matching a request descriptor against a Domain.
type Match struct {
	// Rule is the rule of the node that the descriptor's last entry matched.
	Rule *Rule
	// KeyEntries are the entries that identify the counter: the request's
	// entries, with wildcard patterns instead of values at the levels matched
	// by a share_threshold wildcard. Without such a level it is the caller's
	// slice itself (not a copy): treat it as read-only.
	KeyEntries []ratelimit.Entry
	// MetricID names the match in metrics: Rule.ID, or, for detailed_metric
	// and value_to_metric, the same path with the request's values in it.
	MetricID string
}

// HTTP is the policy of the ext_authz and ext_proc servers.
type HTTP struct {
	// Identity names the caller: it scopes the HTTP limits and the
	// Idempotency-Key records. Without an identity section it is built
	// from Tenant.
	Identity Identity
	// Tenant is the older form of Identity, as it was written.
	Tenant TenantSource
	// Exempt requests skip the HTTP rate limits (health checks, internal callers).
	Exempt Exemptions
	// Routes are tried in order; the first that matches applies.
	Routes []*Route
	// HeaderStyle is the routes' default header_style.
	HeaderStyle HeaderStyle
	// Tiers are the tier sets by name, for routes' tier_limits.
	Tiers map[string]*TierSet
}

// TenantSource names where the tenant of an HTTP request is read from; the
// first source that yields a non-empty value wins, else Default.
type TenantSource struct {
	// Header is a request header set by an authenticating filter, e.g. x-tenant-id.
	Header string
	// Principal takes the mTLS peer principal (SPIFFE ID) when true.
	Principal bool
	// ContextExtension is a key of the route's ext_authz context_extensions.
	ContextExtension string
	// Default is read for compatibility and no longer used: a request
	// without an identity never shares one scope with others.
	Default string
}

// Exemptions lists requests that no HTTP rate limit applies to.
type Exemptions struct {
	// PathPrefixes exempts requests whose path starts with one of these.
	PathPrefixes []string
	// Headers exempts requests carrying one of these headers with this exact value.
	Headers map[string]string
	// Principals exempts requests from these mTLS principals.
	Principals []string
}

// Route is the HTTP policy of the requests it matches.
type Route struct {
	// Name identifies the route in keys, metrics and logs.
	Name string
	// Hosts the route matches, lower-cased as configured (a leading "*."
	// matches one or more labels; a port matches only that port); empty
	// matches every host.
	Hosts []string
	// Methods the route matches; empty matches every method.
	Methods []string
	// Limits are the route's HTTP rate limits, per tenant; all must admit.
	// Empty when Tiers is set.
	Limits []ratelimit.Limit
	// Charged are the route's limits with a `charge` (checked on the
	// request, charged from the response); empty when Tiers is set.
	Charged []*ChargedLimit
	// Tiers, when set, chooses the route's limits by the caller's tier
	// (tier_limits): see LimitsFor.
	Tiers *TierSet
	// Idempotency is nil when the route does not use Idempotency-Key.
	Idempotency *Idempotency
	// HeaderStyle is the rate-limit header fields of the route's answers,
	// its own header_style or the http section's (never zero once loaded).
	HeaderStyle HeaderStyle
	// MaxInFlight, when positive, caps the requests of one caller on this
	// route running at the upstream at once (max_in_flight); 0: no cap.
	MaxInFlight int
	// InFlightTTL is how long an in-flight slot lives without a renewal
	// (in_flight_ttl, default DefaultInFlightTTL): the bound on how long a
	// slot whose release was lost stays held.
	InFlightTTL time.Duration

	tierRef    ref           // tier_limits as written, until resolved
	hosts      []hostPattern // Hosts, parsed
	pathPrefix string
	pathRegex  *regexp.Regexp
}

// Idempotency is a route's Idempotency-Key settings.
type Idempotency struct {
	// Methods the Idempotency-Key applies to; default POST and PATCH.
	Methods []string
	// KeyRequired answers 400 to a request without a key.
	KeyRequired bool
	// LeaseTTL bounds how long a request may hold the key (default 30s).
	LeaseTTL time.Duration
	// RecordTTL is how long a completed response is replayed (default 24h).
	RecordTTL time.Duration
	// StoreStatuses are the upstream statuses stored as COMPLETED; default
	// every 2xx. Entries are codes or classes ("2xx", "4xx", "409").
	StoreStatuses []string
	// MaxBodyBytes caps a response body stored inline in the record
	// (default 1 MiB).
	MaxBodyBytes int64
	// MaxStoredBodyBytes caps a response body kept in object storage
	// (default 100 MiB, at least MaxBodyBytes); a larger reply, or one
	// above MaxBodyBytes with no object storage, is not kept and its key
	// is completed as not replayable.
	MaxStoredBodyBytes int64
	// KeyScope is KeyScopeTenant (a key is one operation per tenant) or
	// KeyScopeRoute (per tenant and route).
	KeyScope string
	// ReplayHeaders is the allow-list of response headers replayed.
	ReplayHeaders []string
	// FingerprintHeaders are request headers hashed into the fingerprint.
	FingerprintHeaders []string
	// FailClosed answers 503 when the store is down; default admits without a lease.
	FailClosed bool
	// KeyHeader is the request header that carries the key, lower case;
	// default idempotency-key (DefaultKeyHeader). Webhook senders put
	// theirs in webhook-id (Standard Webhooks) or a header of their own.
	KeyHeader string
	// CacheLookupMarker adds X-Cache-Lookup: HIT-IDEMPOTENT to every replay,
	// beside Idempotent-Replayed: true, for clients and logs that tell
	// cached answers by it.
	CacheLookupMarker bool

	statuses statusSet
	// keyHeaderLine and keyHeaderPath are where key_header was given
	// (line 0: not given), for the check against the identity's headers.
	keyHeaderLine int
	keyHeaderPath string
}
