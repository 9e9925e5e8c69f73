package authz

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/policy"
)

// Request headers read for idempotency.
const (
	// HeaderIdempotencyKey carries the client's key, unless the route's
	// key_header names another.
	HeaderIdempotencyKey = policy.DefaultKeyHeader
	// HeaderIdempotentReplayed marks a replayed response (Stripe's name;
	// the IETF draft defines none). Its value is "true".
	HeaderIdempotentReplayed = "idempotent-replayed"
	// HeaderCacheLookup, with CacheLookupReplay, also marks a replay on
	// routes with x_cache_lookup: true, for clients and logs that tell
	// cached answers by it (Squid's and many CDNs' header).
	HeaderCacheLookup = "x-cache-lookup"
	CacheLookupReplay = "HIT-IDEMPOTENT"
)

// replayMarkers are the headers that mark a replay on route id (nil: the
// route left the policy since; the one marker every replay carries).
func replayMarkers(id *policy.Idempotency) [][2]string {
	m := [][2]string{{HeaderIdempotentReplayed, "true"}}
	if id != nil && id.CacheLookupMarker {
		m = append(m, [2]string{HeaderCacheLookup, CacheLookupReplay})
	}
	return m
}

// headerList is a request's or response's headers, names lower-cased, in
// arrival order; a name may repeat.
type headerList []idempotency.Header

// values returns every value of name (lower case), in order.
func (h headerList) values(name string) []string {
	var out []string
	for _, f := range h {
		if f.Name == name {
			out = append(out, f.Value)
		}
	}
	return out
}

// get returns the first value of name.
func (h headerList) get(name string) (string, bool) {
	for _, f := range h {
		if f.Name == name {
			return f.Value, true
		}
	}
	return "", false
}

// joined returns the headers as a map, repeated values joined by commas as
// Envoy joins them for ext_authz.
func (h headerList) joined() map[string]string {
	m := make(map[string]string, len(h))
	for _, f := range h {
		if v, ok := m[f.Name]; ok {
			m[f.Name] = v + "," + f.Value
		} else {
			m[f.Name] = f.Value
		}
	}
	return m
}

// headersFromMap turns ext_authz's header map into a list, sorted by name
// so that anything derived from it is deterministic.
func headersFromMap(m map[string]string) headerList {
	h := make(headerList, 0, len(m))
	for k, v := range m {
		h = append(h, idempotency.Header{Name: strings.ToLower(k), Value: v})
	}
	slices.SortFunc(h, func(a, b idempotency.Header) int { return strings.Compare(a.Name, b.Name) })
	return h
}

// idemRequest is what both servers know of a request for idempotency.
type idemRequest struct {
	method, path string // path is the request target, query included
	headers      headerList
	body         []byte
	tenant       string // the caller's scope; "" when no identity source names it
	partialBody  bool   // Envoy cut the body: it cannot be fingerprinted
	// missingStatus answers a keyed request without a tenant (policy
	// identity.missing_status).
	missingStatus int
}

// gateKind is what the idempotency gate decided for a request.
type gateKind int

const (
	gatePass   gateKind = iota // no idempotency applies: let it through
	gateReply                  // answer with result.reply instead of the upstream
	gateReplay                 // answer with the stored result.stored
	gateLease                  // let it through holding result.lease
	gateOpen                   // the store failed; let it through without a lease
)

type gateResult struct {
	kind   gateKind
	reply  *reply
	lease  idempotency.Lease
	key    string
	fp     idempotency.Fingerprint
	stored idempotency.Response
	scope  string // gateReplay: the record's scope, for a replay ticket
}

// gate takes the request-side decision shared by ext_authz and ext_proc.
type gate struct {
	store   idempotency.Store
	events  *IdempotencyMetrics
	timeout time.Duration // bounds every store call
	replay  *Replayer     // nil: bodies in object storage cannot be replayed
	latency *RouteLatency // how long each route's leases are held: 409's Retry-After
}

// eventSite is where an idempotency event happens: the API and the name
// of the policy route ("" when none of the policy is known), the labels it
// is counted under.
type eventSite struct{ api, route string }

// count records one event at site.
func (g *gate) count(at eventSite, e idempotency.Event) {
	g.events.Count(at.api, at.route, e)
}

// applies returns the route's idempotency settings if they apply to method.
func applies(route *policy.Route, method string) *policy.Idempotency {
	if route == nil || route.Idempotency == nil || !route.Idempotency.AppliesTo(method) {
		return nil
	}
	return route.Idempotency
}

// keyHeader is the header that carries route id's key.
func keyHeaderOf(id *policy.Idempotency) string {
	if id.KeyHeader == "" { // a Policy built in Go, not decoded
		return HeaderIdempotencyKey
	}
	return id.KeyHeader
}

// key validates the request's key, in the route's key header
// (Idempotency-Key unless key_header names another). It returns the key,
// or a 400 reply, or neither when the key is absent from an optional route.
func (g *gate) key(at eventSite, id *policy.Idempotency, hs headerList) (string, *reply) {
	header := keyHeaderOf(id)
	vs := hs.values(header)
	switch {
	case len(vs) == 0 && id.KeyRequired:
		g.count(at, idempotency.EventMissing)
		return "", problemKeyMissing(header)
	case len(vs) == 0:
		return "", nil
	case len(vs) > 1:
		g.count(at, idempotency.EventMalformed)
		return "", problemKeyMalformed(fmt.Errorf("the %s field is repeated", header))
	}
	k, err := idempotency.ParseKey(vs[0])
	if err != nil {
		g.count(at, idempotency.EventMalformed)
		return "", problemKeyMalformed(err)
	}
	return k, nil
}

// fingerprint hashes the request with the route's fingerprint headers.
func fingerprint(id *policy.Idempotency, r idemRequest) idempotency.Fingerprint {
	var hs []idempotency.Header
	for _, name := range id.FingerprintHeaders {
		n := strings.ToLower(name)
		for _, v := range r.headers.values(n) {
			hs = append(hs, idempotency.Header{Name: n, Value: v})
		}
	}
	return idempotency.NewFingerprint(r.method, r.path, r.body, hs)
}

func ttlsOf(id *policy.Idempotency) idempotency.TTLs {
	return idempotency.TTLs{Lease: id.LeaseTTL, Record: id.RecordTTL}
}

// begin runs Begin for a validated key and maps the outcome. failClosed
// picks the answer when the store fails: 503, or admit without a lease.
func (g *gate) begin(ctx context.Context, at eventSite, scope, key string, fp idempotency.Fingerprint, ttls idempotency.TTLs, failClosed bool) gateResult {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	o, err := g.store.Begin(ctx, scope, key, fp, ttls)
	if err != nil {
		g.count(at, idempotency.EventStoreError)
		if failClosed {
			g.count(at, idempotency.EventUnavailable)
			return gateResult{kind: gateReply, reply: problemUnavailable()}
		}
		g.count(at, idempotency.EventFailOpen)
		return gateResult{kind: gateOpen}
	}
	switch o.Kind {
	case idempotency.Acquired:
		g.count(at, idempotency.EventAcquired)
		return gateResult{kind: gateLease, lease: o.Lease, fp: fp}
	case idempotency.InProgress:
		g.count(at, idempotency.EventConflict)
		est, known := g.latency.Estimate(at.route)
		return gateResult{kind: gateReply, reply: problemInProgress(inProgressWait(est, known, ttls.Lease, o.RetryAfter), known)}
	case idempotency.Mismatch:
		g.count(at, idempotency.EventMismatch)
		return gateResult{kind: gateReply, reply: problemKeyReused()}
	case idempotency.Unreplayable:
		g.count(at, idempotency.EventUnreplayable)
		return gateResult{kind: gateReply, reply: problemNotReplayable(o.Response.Status)}
	}
	return gateResult{kind: gateReplay, stored: o.Response, key: key, fp: fp, scope: scope}
}

// decide is the whole request-side decision for one request on route.
func (g *gate) decide(ctx context.Context, api string, route *policy.Route, r idemRequest) gateResult {
	id := applies(route, r.method)
	if id == nil {
		return gateResult{kind: gatePass}
	}
	at := eventSite{api: api, route: route.Name}
	key, bad := g.key(at, id, r.headers)
	switch {
	case bad != nil:
		return gateResult{kind: gateReply, reply: bad}
	case key == "":
		return gateResult{kind: gatePass}
	case r.partialBody:
		g.count(at, idempotency.EventBodyTooBig)
		return gateResult{kind: gateReply, reply: problemBodyTooLarge()}
	case r.tenant == "":
		// No shared scope: two unnamed callers' keys must never meet.
		return gateResult{kind: gateReply, reply: problemIdentityMissing(r.missingStatus)}
	}
	return g.begin(ctx, at, keyScope(r.tenant, route), key, fingerprint(id, r), ttlsOf(id), id.FailClosed)
}

// keyScope is the store scope of a route's keys: the caller's scope, or
// with key_scope route the route's name and the caller's scope. The route
// form is tagged like the identity sources' scopes (a tenant header value
// never starts with scopeMark untagged) and length-prefixes the name, so
// no caller scope can forge a route scope or another route's.
func keyScope(tenant string, route *policy.Route) string {
	if route.Idempotency.KeyScope == policy.KeyScopeRoute {
		return scopeRoute + strconv.Itoa(len(route.Name)) + ":" + route.Name + tenant
	}
	return tenant
}

// replayReply renders a stored response for replay: its status, body and
// allow-listed headers (filtered again, in case the allow-list shrank since
// it was stored), plus the replay markers (Idempotent-Replayed: true, and
// X-Cache-Lookup: HIT-IDEMPOTENT where the route asks).
func replayReply(id *policy.Idempotency, resp idempotency.Response) *reply {
	hs := idempotency.ReplayHeaders(resp.Headers, id.ReplayHeader)
	markers := replayMarkers(id)
	r := &reply{status: resp.Status, body: resp.Body, headers: make([][2]string, 0, len(hs)+len(markers))}
	for _, h := range hs {
		r.headers = append(r.headers, [2]string{h.Name, h.Value})
	}
	r.headers = append(r.headers, markers...)
	return r
}

// replayTicket is the gate's answer to a replay whose body is in object
// storage: a signed ticket for the replay endpoint with the proof of the
// caller's scope, or, when replays of such bodies are not configured, a
// 503 problem (the request ran; it must not run again). The ticket names
// route, so that the endpoint counts the replay under it.
func (g *gate) replayTicket(route string, id *policy.Idempotency, res gateResult) (replayMark, *reply) {
	if g.replay == nil {
		return replayMark{}, problemReplayUnavailable()
	}
	var hs []idempotency.Header
	keyHeader := HeaderIdempotencyKey
	if id != nil { // nil: the route vanished since; replay no headers
		hs = idempotency.ReplayHeaders(res.stored.Headers, id.ReplayHeader)
		keyHeader = keyHeaderOf(id)
	}
	// The endpoint sets Idempotent-Replayed itself; the ticket carries the
	// route's other markers, as it carries its headers.
	for _, m := range replayMarkers(id)[1:] {
		hs = append(hs, idempotency.Header{Name: m[0], Value: m[1]})
	}
	return replayMark{ticket: g.replay.issue(route, res.scope, res.key, keyHeader, res.stored, hs), scope: g.replay.scopeProof(res.scope)}, nil
}
