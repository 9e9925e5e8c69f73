package admin

import (
	"encoding/json"
	"net/http"

	"github.com/extauthz/extauthz/pkg/envoy/authz"
	"github.com/extauthz/extauthz/pkg/envoy/rls"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// ExplainRequest is the body of POST /v1/explain: one of RateLimit (a
// ShouldRateLimit call) or HTTP (an ext_authz Check).
type ExplainRequest struct {
	RateLimit *RateLimitCall `json:"ratelimit,omitempty"`
	HTTP      *HTTPCall      `json:"http,omitempty"`
}

// RateLimitCall is a ShouldRateLimit request.
type RateLimitCall struct {
	Domain string `json:"domain"`
	// Descriptors are lists of entries, each {"key": ..., "value": ...}.
	Descriptors [][]Entry `json:"descriptors"`
	HitsAddend  uint32    `json:"hits_addend,omitempty"`
}

// Entry is one descriptor entry.
type Entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// HTTPCall is the part of an ext_authz Check the decision reads.
type HTTPCall struct {
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	Host    string            `json:"host,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	// SourceAddress is the client as Envoy sees its peer: "ip" or "ip:port".
	SourceAddress string `json:"source_address,omitempty"`
	// Principal is the mTLS peer principal (a SPIFFE ID in a mesh).
	Principal string `json:"principal,omitempty"`
}

// HTTPExplanation answers POST /v1/explain for an HTTP request.
type HTTPExplanation struct {
	// Route is the matched route; empty when none matched (admitted).
	Route string `json:"route"`
	// Identity is the caller's scope; IdentitySource the identity chain
	// entry that named it (empty: none did, limits fall back to the
	// client address).
	Identity       string `json:"identity"`
	IdentitySource string `json:"identity_source,omitempty"`
	// Tier is the caller's tier on a route with tier_limits (the default
	// for a missing or unknown plan).
	Tier    string       `json:"tier,omitempty"`
	Exempt  bool         `json:"exempt,omitempty"`
	Counter string       `json:"counter,omitempty"`
	Limits  []LimitState `json:"limits,omitempty"`
	// WouldAnswer is "admit" or "429" (the rate limits and the free
	// max_in_flight slots; an Idempotency-Key decision would take a lease,
	// so it is not made).
	WouldAnswer string `json:"would_answer"`
	// RecordScope is the scope of the caller's Idempotency-Key records on
	// this route (for /v1/idempotency/record: identity and route).
	RecordScope string `json:"idempotency_record_scope,omitempty"`
	// InFlight is the caller's max_in_flight slots on the route (routes
	// with max_in_flight only).
	InFlight *InFlightState `json:"in_flight,omitempty"`
	// Charged is the route's charged limits (the caller's tier's), read
	// as their check reads them: nothing charged, no lockout tripped.
	Charged []ChargedLimitState `json:"charged,omitempty"`
}

// InFlightState is a caller's max_in_flight slots on a route, counted
// without taking one.
type InFlightState struct {
	// Key is the caller's slot key; Where the store's name for it (the
	// Redis key with the Redis store).
	Key        string  `json:"key"`
	Where      string  `json:"where,omitempty"`
	Limit      int     `json:"limit"`
	Held       int     `json:"held"`
	TTLSeconds float64 `json:"ttl_seconds"`
	// NextExpirySeconds is when the soonest held slot expires unless it
	// is renewed or released first (an upper bound on the wait for one to
	// free); absent with none held.
	NextExpirySeconds float64 `json:"next_expiry_seconds,omitempty"`
}

// explain answers POST /v1/explain.
func (a *API) explain(r *http.Request) (any, []string, error) {
	var in ExplainRequest
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return nil, nil, badRequest("body", "body: %v", err)
	}
	switch {
	case (in.RateLimit == nil) == (in.HTTP == nil):
		return nil, nil, badRequest("body", `send exactly one of "ratelimit" and "http"`)
	case in.RateLimit != nil:
		q, err := in.RateLimit.query()
		if err != nil {
			return nil, nil, err
		}
		st, keys, _, err := a.rateLimitState(r, q)
		return st, keys, err
	}
	return a.explainHTTP(r, in.HTTP)
}

func (c *RateLimitCall) query() (rls.Query, error) {
	q := rls.Query{Domain: c.Domain, HitsAddend: c.HitsAddend}
	if c.Domain == "" || len(c.Descriptors) == 0 {
		return q, badRequest("ratelimit", "ratelimit: domain and descriptors are required")
	}
	for _, es := range c.Descriptors {
		d := make([]ratelimit.Entry, len(es))
		for i, e := range es {
			d[i] = ratelimit.Entry(e)
		}
		q.Descriptors = append(q.Descriptors, d)
	}
	return q, nil
}

func (a *API) explainHTTP(r *http.Request, c *HTTPCall) (any, []string, error) {
	if c.Method == "" || c.Path == "" {
		return nil, nil, badRequest("http", "http: method and path are required")
	}
	ex, err := a.o.HTTP.Explain(r.Context(), authz.HTTPRequest{Method: c.Method, Path: c.Path, Host: c.Host,
		Headers: c.Headers, SourceAddress: c.SourceAddress, Principal: c.Principal})
	if err != nil {
		return nil, nil, err
	}
	out := HTTPExplanation{Identity: ex.Identity, IdentitySource: string(ex.Source), Exempt: ex.Exempt,
		WouldAnswer: "admit", RecordScope: ex.RecordScope}
	if ex.Route == nil {
		return out, nil, nil
	}
	out.Route, out.Tier = ex.Route.Name, ex.Tier
	if !ex.Allowed {
		out.WouldAnswer = "429"
	}
	var keys []string
	if ex.Request != nil {
		out.Counter = ex.Request.Key
		out.Limits = a.limitStates(*ex.Request, ex.Names, ex.Results)
		for _, l := range out.Limits {
			keys = append(keys, l.Key)
		}
	}
	if f := ex.InFlight; f != nil {
		out.InFlight = &InFlightState{Key: f.Key, Where: f.Held.Where, Limit: f.Limit, Held: f.Held.Slots,
			TTLSeconds: seconds(f.TTL), NextExpirySeconds: seconds(f.Held.NextExpiry)}
		if f.Held.Where != "" {
			keys = append(keys, f.Held.Where)
		}
	}
	charged, chargedKeys := a.chargedStates(ex.Charged)
	out.Charged, keys = charged, append(keys, chargedKeys...)
	return out, keys, nil
}
