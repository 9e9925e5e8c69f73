package admin

import (
	"net/http"
	"strings"
	"time"

	"github.com/extauthz/extauthz/pkg/envoy/rls"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// LimitState is one limit of a descriptor or route, as the API shows it.
type LimitState struct {
	Name          string  `json:"name"`
	Algorithm     string  `json:"algorithm"`
	Requests      int64   `json:"requests"`
	PeriodSeconds float64 `json:"period_seconds"`
	Burst         int64   `json:"burst,omitempty"`
	// Consistency is "allotment" for a leased limit, empty when exact.
	Consistency string `json:"consistency,omitempty"`
	// Key is where the state lives (the Redis key with the Redis store).
	Key              string  `json:"key,omitempty"`
	Limit            int64   `json:"limit"`
	Remaining        int64   `json:"remaining"`
	ResetSeconds     float64 `json:"reset_seconds"`
	RetryAfterSecond float64 `json:"retry_after_seconds,omitempty"`
}

// DescriptorState is one descriptor of a ShouldRateLimit request.
type DescriptorState struct {
	Descriptor string `json:"descriptor"`
	// Outcome is what a real call would count it as (ok, over_limit,
	// shadow, no_match, unlimited, replaced, rejected).
	Outcome string `json:"outcome"`
	Rule    string `json:"rule,omitempty"`
	RuleID  string `json:"rule_id,omitempty"`
	// Why lists what shaped the answer besides the limits' state.
	Why []string `json:"why,omitempty"`
	// Hits is what a real call charges; Counter the counter's identity
	// (tenant|domain|entries) before the store names its keys.
	Hits    int64        `json:"hits,omitempty"`
	Counter string       `json:"counter,omitempty"`
	Limits  []LimitState `json:"limits,omitempty"`
}

// RateLimitState answers the state, reset and explain calls for an RLS
// request.
type RateLimitState struct {
	Domain      string            `json:"domain"`
	KnownDomain bool              `json:"known_domain"`
	Descriptors []DescriptorState `json:"descriptors"`
	// WouldAnswer is the overall code a real call would get now.
	WouldAnswer string `json:"would_answer"`
	// Reset lists the keys deleted (reset only).
	Reset []string `json:"reset,omitempty"`
}

// state answers GET /v1/ratelimit/state: the descriptors' state, read
// with 0-hit decisions.
func (a *API) state(r *http.Request) (any, []string, error) {
	req, err := rlsQuery(r)
	if err != nil {
		return nil, nil, err
	}
	st, keys, _, err := a.rateLimitState(r, req)
	return st, keys, err
}

// reset answers POST /v1/ratelimit/reset: it deletes the counters of every
// counted descriptor and reports their state afterwards.
func (a *API) reset(r *http.Request) (any, []string, error) {
	req, err := rlsQuery(r)
	if err != nil {
		return nil, nil, err
	}
	_, keys, reqs, err := a.rateLimitState(r, req)
	if err != nil {
		return nil, nil, err
	}
	if err := a.o.Limits.Reset(r.Context(), reqs); err != nil {
		return nil, keys, err
	}
	st, _, _, err := a.rateLimitState(r, req)
	st.Reset = keys
	if keys == nil {
		st.Reset = []string{}
	}
	return st, keys, err
}

// rateLimitState explains req and returns the answer, the store keys
// involved and the store requests of the counted descriptors.
func (a *API) rateLimitState(r *http.Request, q rls.Query) (RateLimitState, []string, []ratelimit.Request, error) {
	ex, err := a.o.RLS.Explain(r.Context(), q)
	if err != nil {
		return RateLimitState{}, nil, nil, err
	}
	st := RateLimitState{Domain: ex.Domain, KnownDomain: ex.Known, WouldAnswer: ex.Overall,
		Descriptors: make([]DescriptorState, len(ex.Descriptors))}
	var keys []string
	var reqs []ratelimit.Request
	for i, d := range ex.Descriptors {
		ds := DescriptorState{Descriptor: formatDescriptor(q.Descriptors[i]), Outcome: d.Outcome,
			Rule: d.Rule, RuleID: d.RuleID, Why: why(d)}
		if d.Request != nil && !d.Blocked {
			ds.Hits, ds.Counter = d.Request.Hits, d.Request.Key
			ds.Limits = a.limitStates(*d.Request, d.Names, d.Results)
			for _, l := range ds.Limits {
				keys = append(keys, l.Key)
			}
			reqs = append(reqs, *d.Request)
		}
		st.Descriptors[i] = ds
	}
	return st, keys, reqs, nil
}

// why names the modes that shaped a descriptor's answer.
func why(d rls.Descriptor) []string {
	var out []string
	for _, m := range []struct {
		on   bool
		text string
	}{
		{d.Rule == "" && d.Outcome == "no_match", "no rule matches these entries"},
		{d.Override, "Envoy sent its own limit with the descriptor (limit override)"},
		{d.Shadow, "shadow_mode: counted, never denies"},
		{d.Quota, "quota_mode: denies only when every quota descriptor is over"},
		{d.Blocked, "requests_per_unit 0: always denied, never counted"},
		{d.Outcome == "replaced", "another matched rule replaces this one"},
		{d.Outcome == "unlimited", "unlimited rule: never counted"},
		{d.Outcome == "rejected", "the descriptor breaks the request bounds (see docs/envoy.md)"},
	} {
		if m.on {
			out = append(out, m.text)
		}
	}
	return out
}

// limitStates describes each limit of req with its state and key.
func (a *API) limitStates(req ratelimit.Request, names []string, results []ratelimit.Result) []LimitState {
	keys := a.o.Limits.StateKeys(req)
	out := make([]LimitState, len(req.Limits))
	for i, l := range req.Limits {
		ls := LimitState{Algorithm: string(l.Algorithm.OrDefault()), Requests: l.Requests,
			PeriodSeconds: l.Period.Seconds(), Burst: l.Burst}
		if l.Consistency == ratelimit.Allotment {
			ls.Consistency = string(l.Consistency)
		}
		if i < len(names) {
			ls.Name = names[i]
		}
		if i < len(keys) {
			ls.Key = keys[i]
		}
		if i < len(results) {
			res := results[i]
			ls.Limit, ls.Remaining = res.Limit, res.Remaining
			ls.ResetSeconds, ls.RetryAfterSecond = seconds(res.ResetAfter), seconds(res.RetryAfter)
		}
		out[i] = ls
	}
	return out
}

// seconds renders d in seconds, to the millisecond.
func seconds(d time.Duration) float64 {
	return float64(d.Round(time.Millisecond)) / float64(time.Second)
}

// rlsQuery reads domain and the repeated descriptor parameters (the query,
// or a form body for POST).
func rlsQuery(r *http.Request) (rls.Query, error) {
	if err := r.ParseForm(); err != nil {
		return rls.Query{}, badRequest("query", "%v", err)
	}
	q := rls.Query{Domain: r.Form.Get("domain")}
	if q.Domain == "" {
		return q, badRequest("domain", "domain is required, e.g. ?domain=edge&descriptor=tenant=acme,route=orders")
	}
	raw := r.Form["descriptor"]
	if len(raw) == 0 {
		return q, badRequest("descriptor", "at least one descriptor=k=v[,k=v...] is required")
	}
	for _, s := range raw {
		d, err := parseDescriptor(s)
		if err != nil {
			return q, err
		}
		q.Descriptors = append(q.Descriptors, d)
	}
	return q, nil
}

// parseDescriptor reads "k=v,k=v": entries split at commas, each at its
// first '=' (a value may hold '=' but not ','; POST /v1/explain takes any
// value).
func parseDescriptor(s string) ([]ratelimit.Entry, error) {
	var d []ratelimit.Entry
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(part, "=")
		if !ok || k == "" {
			return nil, badRequest("descriptor", "descriptor %q: want k=v[,k=v...], got entry %q", s, part)
		}
		d = append(d, ratelimit.Entry{Key: k, Value: v})
	}
	return d, nil
}

// formatDescriptor renders a descriptor as parseDescriptor reads it.
func formatDescriptor(d []ratelimit.Entry) string {
	parts := make([]string, len(d))
	for i, e := range d {
		parts[i] = e.Key + "=" + e.Value
	}
	return strings.Join(parts, ",")
}
