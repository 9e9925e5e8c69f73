package policy

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/extauthz/extauthz/pkg/idempotency"
)

// Idempotency defaults, applied when a route's idempotency section leaves a
// field out.
const (
	DefaultLeaseTTL     = 30 * time.Second
	DefaultRecordTTL    = 24 * time.Hour
	DefaultMaxBodyBytes = 1 << 20
	// DefaultMaxStoredBodyBytes caps a body kept in object storage.
	DefaultMaxStoredBodyBytes = 100 << 20
)

// DefaultKeyHeader carries the key when a route names no key_header.
const DefaultKeyHeader = "idempotency-key"

// Key scopes: which requests share an Idempotency-Key.
const (
	// KeyScopeTenant: one key names one operation across the tenant's
	// routes (the default).
	KeyScopeTenant = "tenant"
	// KeyScopeRoute: one key on two routes is two operations.
	KeyScopeRoute = "route"
)

// defaultReplayHeaders are the response headers replayed when a route does
// not list its own: they describe the stored body and the created resource,
// and none of them is per-response (Date), per-connection or a credential.
var defaultReplayHeaders = []string{
	"content-type", "content-encoding", "content-language", "content-location",
	"location", "etag", "last-modified", "link",
}

// DefaultReplayHeaders returns (a copy of) the response headers replayed when
// a route does not list its own.
func DefaultReplayHeaders() []string { return slices.Clone(defaultReplayHeaders) }

// idempotency reads a route's idempotency section, filling the defaults.
func (d *decoder) idempotency(f field) *Idempotency {
	id := &Idempotency{
		Methods: []string{"POST", "PATCH"}, LeaseTTL: DefaultLeaseTTL, RecordTTL: DefaultRecordTTL,
		StoreStatuses: []string{"2xx"}, MaxBodyBytes: DefaultMaxBodyBytes,
		MaxStoredBodyBytes: DefaultMaxStoredBodyBytes, KeyScope: KeyScopeTenant,
		ReplayHeaders: DefaultReplayHeaders(), KeyHeader: DefaultKeyHeader,
	}
	var storedLine int
	var storedPath string
	for _, kv := range d.fields(f.node, f.path) {
		switch kv.key {
		case "methods":
			if id.Methods = d.methods(kv); len(id.Methods) == 0 {
				d.problem(kv.line, kv.path, "must list at least one method")
			}
		case "key_required":
			id.KeyRequired = d.boolean(kv)
		case "lease_ttl":
			id.LeaseTTL = d.positiveDuration(kv)
		case "record_ttl":
			id.RecordTTL = d.positiveDuration(kv)
		case "store_statuses":
			id.StoreStatuses = d.statuses(kv, &id.statuses)
		case "max_body_bytes":
			if id.MaxBodyBytes = d.integer(kv); id.MaxBodyBytes < 1 {
				d.problem(kv.line, kv.path, "must be at least 1, got %d", id.MaxBodyBytes)
			}
		case "max_stored_body_bytes":
			id.MaxStoredBodyBytes, storedLine, storedPath = d.integer(kv), kv.line, kv.path
		case "key_scope":
			id.KeyScope = d.keyScope(kv)
		case "replay_headers":
			id.ReplayHeaders = d.replayHeaders(kv)
		case "fingerprint_headers":
			id.FingerprintHeaders = d.headerNames(kv)
		case "failure_mode":
			id.FailClosed = d.failureMode(kv)
		case "key_header":
			id.KeyHeader, id.keyHeaderLine, id.keyHeaderPath = d.keyHeader(kv), kv.line, kv.path
		case "x_cache_lookup":
			id.CacheLookupMarker = d.boolean(kv)
		default:
			d.unknown(kv)
		}
	}
	if id.statuses == (statusSet{}) {
		d.statusInto("2xx", &id.statuses)
	}
	if storedPath != "" && id.MaxStoredBodyBytes < id.MaxBodyBytes {
		d.problem(storedLine, storedPath, "must be at least max_body_bytes (%d), got %d", id.MaxBodyBytes, id.MaxStoredBodyBytes)
	}
	return id
}

// notKeyHeaders are request headers that cannot carry a key a client
// chose for one operation: the same on every request of a client
// (content-type, user-agent), set or rewritten by proxies (host,
// forwarded), or credentials, which the stores would keep in clear.
var notKeyHeaders = []string{
	"host", "content-type", "content-encoding", "accept", "accept-encoding", "user-agent",
	"forwarded", "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-real-ip",
	"x-api-key", "api-key",
}

// keyHeader reads key_header: a header name a client sets per operation.
func (d *decoder) keyHeader(f field) string {
	name := d.headerName(f)
	if name != DefaultKeyHeader && (idempotency.NeverReplayed(name) || slices.Contains(notKeyHeaders, name)) {
		d.problem(f.line, f.path, "%s cannot carry an idempotency key: it is a credential, describes the connection, or is the same on every request", name)
	}
	return name
}

func (d *decoder) keyScope(f field) string {
	switch v := strings.ToLower(d.str(f)); v {
	case KeyScopeTenant, KeyScopeRoute:
		return v
	}
	d.problem(f.line, f.path, "want tenant or route, got %s", describe(f.node))
	return KeyScopeTenant
}

func (d *decoder) positiveDuration(f field) time.Duration {
	v, err := time.ParseDuration(d.str(f))
	if err != nil || v <= 0 {
		d.problem(f.line, f.path, "want a positive duration such as 30s or 24h, got %s", describe(f.node))
	}
	return v
}

func (d *decoder) failureMode(f field) bool {
	switch strings.ToLower(d.str(f)) {
	case "open":
		return false
	case "closed":
		return true
	}
	d.problem(f.line, f.path, "want open or closed, got %s", describe(f.node))
	return false
}

func (d *decoder) headerNames(f field) []string {
	var out []string
	for _, item := range d.items(f) {
		out = append(out, d.headerName(item))
	}
	return out
}

func (d *decoder) replayHeaders(f field) []string {
	var out []string
	for _, item := range d.items(f) {
		name := d.headerName(item)
		// One list decides, the one the stores apply: a name the policy
		// accepted would otherwise be dropped silently at replay.
		if idempotency.NeverReplayed(name) {
			d.problem(item.line, item.path, "%s must never be replayed", name)
			continue
		}
		out = append(out, name)
	}
	return out
}

// statuses reads store_statuses: codes ("201") and classes ("2xx").
func (d *decoder) statuses(f field, set *statusSet) []string {
	var out []string
	for _, item := range d.items(f) {
		s := strings.ToLower(d.str(item))
		if !d.statusInto(s, set) {
			d.problem(item.line, item.path, "want a status code (100-599) or a class (1xx-5xx), got %s", describe(item.node))
			continue
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		d.problem(f.line, f.path, "must list at least one status or class")
	}
	return out
}

// statusInto adds a code or class to set, reporting whether s was one.
func (d *decoder) statusInto(s string, set *statusSet) bool {
	if len(s) == 3 && s[1:] == "xx" && s[0] >= '1' && s[0] <= '5' {
		base := int(s[0]-'0') * 100
		for c := base; c < base+100; c++ {
			set.add(c)
		}
		return true
	}
	code, err := strconv.Atoi(s)
	if err != nil || len(s) != 3 || code < 100 || code > 599 {
		return false
	}
	set.add(code)
	return true
}

// statusSet is a bitmap of the status codes 0-639.
type statusSet [10]uint64

func (s *statusSet) add(code int) { s[code/64] |= 1 << (code % 64) }

func (s *statusSet) has(code int) bool {
	return code >= 0 && code < 640 && s[code/64]&(1<<(code%64)) != 0
}

// StoresStatus reports whether an upstream reply with this status is stored
// as the key's completed response.
func (id *Idempotency) StoresStatus(code int) bool {
	return id != nil && id.statuses.has(code)
}

// AppliesTo reports whether requests with this method use the
// Idempotency-Key (methods compare case-insensitively).
func (id *Idempotency) AppliesTo(method string) bool {
	return id != nil && containsFold(id.Methods, method)
}

// ReplayHeader reports whether a response header is replayed with a stored
// response (names compare case-insensitively).
func (id *Idempotency) ReplayHeader(name string) bool {
	return id != nil && containsFold(id.ReplayHeaders, name)
}
