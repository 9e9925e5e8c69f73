package rls

import (
	"context"

	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// Explanation is what ShouldRateLimit would answer to a request right now,
// worked out without charging anything (for operators: the admin API).
type Explanation struct {
	// Domain is the request's domain; Known reports whether the policy has it.
	Domain string
	Known  bool
	// Descriptors explains each descriptor of the request, in order.
	Descriptors []Descriptor
	// Overall is the response's overall code: "OK" or "OVER_LIMIT".
	Overall string
}

// Descriptor is what one descriptor of a request turned into.
type Descriptor struct {
	// Outcome is the outcome it would be counted under in
	// extauthz_decisions_total: ok, over_limit, shadow, no_match, unlimited,
	// replaced, rejected...
	Outcome string
	// Rule is the matched rule's name (rate_limit.name, else its ID); RuleID
	// its configured path; both empty when no rule matched.
	Rule, RuleID string
	// Override, Shadow, Quota and Blocked are the rule's (or the request's)
	// modes that shaped the answer.
	Override, Shadow, Quota, Blocked bool
	// Request is the store request the descriptor is counted with (Hits as
	// a real call would charge); nil when it is not counted.
	Request *ratelimit.Request
	// Names names each limit of Request, Results holds each limit's current
	// state (from a 0-hit decision: nothing was charged).
	Names   []string
	Results []ratelimit.Result
}

// planAll matches req's descriptors as ShouldRateLimit does.
func (s *RLS) planAll(req *rlsv3.RateLimitRequest) ([]planned, []ratelimit.Request, bool) {
	dom := s.domain(req.GetDomain())
	fixed := make([]string, len(req.GetDescriptors()))
	screen(req, fixed)
	items, reqs := s.plan(dom, req, fixed)
	return items, reqs, dom != nil
}

// Query is a ShouldRateLimit request in plain values, for callers that
// do not speak Envoy's protos (the admin API).
type Query struct {
	Domain      string
	Descriptors [][]ratelimit.Entry
	// HitsAddend is the request's hits_addend: 0 means 1.
	HitsAddend uint32
}

// proto is q as Envoy would send it.
func (q Query) proto() *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: q.Domain, HitsAddend: q.HitsAddend}
	for _, es := range q.Descriptors {
		d := &commonrlv3.RateLimitDescriptor{}
		for _, e := range es {
			d.Entries = append(d.Entries, &commonrlv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	return req
}

// Explain is explain for a Query.
func (s *RLS) Explain(ctx context.Context, q Query) (Explanation, error) {
	return s.explain(ctx, q.proto())
}

// explain plans req, reads the current state of every counted limit with a
// 0-hit decision (which charges nothing and writes nothing), and works out
// the answer a real call charging the planned hits would get. The only
// error is the store's.
func (s *RLS) explain(ctx context.Context, req *rlsv3.RateLimitRequest) (Explanation, error) {
	items, reqs, known := s.planAll(req)
	peek := make([]ratelimit.Request, len(reqs))
	for i, r := range reqs {
		peek[i] = ratelimit.Request{Key: r.Key, Limits: r.Limits}
	}
	states, err := s.decide(ctx, peek)
	if err != nil {
		return Explanation{}, err
	}
	// Each algorithm admits h hits exactly when every limit has at least h
	// remaining, so the would-be decision follows from the state.
	would := make([]ratelimit.Decision, len(states))
	for i, d := range states {
		would[i] = ratelimit.Decision{Allowed: true, Results: d.Results}
		for _, r := range d.Results {
			would[i].Allowed = would[i].Allowed && r.Remaining >= reqs[i].Hits
		}
	}
	counted := make([]bool, len(items)) // respond sets every outcome
	for i := range items {
		counted[i] = items[i].counted()
	}
	mode := s.mode
	if dom := s.domain(req.GetDomain()); dom != nil {
		mode.style = dom.HeaderStyle
	}
	resp := respond(items, would, mode)
	denyRejected(resp, items)
	ex := Explanation{Domain: req.GetDomain(), Known: known, Overall: resp.GetOverallCode().String(),
		Descriptors: make([]Descriptor, len(items))}
	for i := range items {
		ex.Descriptors[i] = describe(&items[i], counted[i], reqs, states)
	}
	return ex, nil
}

// describe turns one planned descriptor into its Descriptor.
func describe(it *planned, counted bool, reqs []ratelimit.Request, states []ratelimit.Decision) Descriptor {
	d := Descriptor{Outcome: it.outcome, Override: it.override, Shadow: it.shadow,
		Quota: it.quota, Blocked: it.blocked, Names: it.names()}
	if it.rule != nil {
		d.Rule, d.RuleID = ruleName(it.rule), it.rule.ID
	}
	switch {
	case !counted:
	case it.blocked: // denied without asking the store
		d.Request = &ratelimit.Request{Limits: it.limits, Hits: it.hits}
		d.Results = blockedDecision(it.limits[0]).Results
	default:
		r := reqs[it.batch]
		d.Request, d.Results = &r, states[it.batch].Results
	}
	return d
}
