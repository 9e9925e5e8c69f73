package rls

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/policy"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// planned is what one descriptor of a request turned into.
type planned struct {
	// outcome is set at planning for descriptors that are not counted
	// (no_match, unlimited, replaced) and by respond for the others.
	outcome string
	// rule is the matched rule; nil when none matched.
	rule *policy.Rule
	// metric is the match's metric ID (policy.Match.MetricID), the "rule"
	// label of the per-rule metrics; empty for an unmatched override.
	metric string
	// override marks a descriptor carrying its own limit (RateLimitDescriptor.limit).
	override bool
	// limits are decided for this descriptor; name(i) names limits[i].
	limits []ratelimit.Limit
	// shadow answers OK whatever the decision.
	shadow bool
	// quota is the rule's quota_mode: over its limit, the descriptor denies
	// only when every quota descriptor of the request is over too.
	quota bool
	// blocked denies without asking the store (requests_per_unit: 0).
	blocked bool
	// chargeOver is the rule's charge_over_limit (see storeRequest).
	chargeOver bool
	// refund marks a descriptor with is_negative_hits: hits is negative.
	refund bool
	// batch is the index of the descriptor's ratelimit.Request, hits its cost.
	batch int
	hits  int64
}

func (p *planned) counted() bool { return p.outcome == "" }

// name names limits[i] for current_limit and the RateLimit headers: its
// own name, else the rule's (see envoy.LimitName). An override's limit
// always carries its name. Computed when asked: a slice of names per
// decision would be an allocation each.
func (p *planned) name(i int) string {
	if p.override {
		return p.limits[i].Name
	}
	return envoy.LimitName(ruleName(p.rule), p.limits, i)
}

// names lists name(i) for every limit, nil when there are none.
func (p *planned) names() []string {
	if len(p.limits) == 0 {
		return nil
	}
	names := make([]string, len(p.limits))
	for i := range names {
		names[i] = p.name(i)
	}
	return names
}

// plan matches every descriptor and returns one planned per descriptor and
// the store requests of the counted ones. fixed holds the outcomes screen
// settled; those descriptors are not matched.
func (s *RLS) plan(dom *policy.Domain, req *rlsv3.RateLimitRequest, fixed []string) ([]planned, []ratelimit.Request) {
	descs := req.GetDescriptors()
	items, reqs := newPlan(len(descs))
	keys := make([]string, len(descs))
	for i := range items {
		items[i].outcome = fixed[i]
	}
	if dom == nil {
		for i := range items {
			if items[i].outcome == "" {
				items[i].outcome = envoy.OutcomeNoMatch
			}
		}
		return items, nil
	}
	// Whether a leading tenant entry is stripped is a property of the
	// domain; it is looked up only when some descriptor starts with one.
	strip, known := false, false
	for i, d := range descs {
		if fixed[i] != "" {
			continue // screen guarantees entries to the others
		}
		if !known && s.tenantKey != "" && d.GetEntries()[0].GetKey() == s.tenantKey {
			strip, known = !dom.HasTopLevelKey(s.tenantKey), true
		}
		items[i], keys[i] = s.planOne(dom, req.GetDomain(), d, strip)
	}
	applyReplaces(items)

	hits := int64(req.GetHitsAddend())
	if hits == 0 {
		hits = 1 // the proto's "0 means 1"
	}
	for i := range items {
		if !items[i].counted() {
			continue
		}
		h := descriptorHits(descs[i], hits)
		if descs[i].GetIsNegativeHits() {
			h, items[i].refund = -h, true
		}
		switch items[i].hits = h; {
		case items[i].blocked && items[i].refund:
			items[i].outcome = OutcomeRefunded // nothing was charged to give back
			continue
		case items[i].blocked:
			continue
		}
		items[i].batch = len(reqs)
		reqs = append(reqs, storeRequest(keys[i], &items[i], s.charging))
	}
	return items, reqs
}

// uncountChecks gives each admitted check (ChargeNever, see storeRequest)
// back the hit it was decided with, so that limit_remaining and the
// RateLimit fields say what is left now, not after a hit nobody charged.
func uncountChecks(reqs []ratelimit.Request, decisions []ratelimit.Decision) {
	for i, r := range reqs {
		if r.Charge != ratelimit.ChargeNever {
			continue
		}
		for j := range decisions[i].Results {
			if res := &decisions[i].Results[j]; res.Allowed {
				res.Remaining += r.Hits
			}
		}
	}
}

// onePlan is the plan of a one-descriptor request, the common case, and
// its store request: one allocation where two slices would be two. Both
// live as long as the call.
type onePlan struct {
	item [1]planned
	req  [1]ratelimit.Request
}

// newPlan returns room for n descriptors' plans and an empty list of store
// requests with room for one per descriptor.
func newPlan(n int) ([]planned, []ratelimit.Request) {
	if n == 1 {
		p := new(onePlan)
		return p.item[:], p.req[:0]
	}
	return make([]planned, n), make([]ratelimit.Request, 0, n)
}

// planOne matches one descriptor and returns its plan and counter key.
func (s *RLS) planOne(dom *policy.Domain, domain string, d *commonrlv3.RateLimitDescriptor, strip bool) (planned, string) {
	tenant, entries := s.splitTenant(d.GetEntries(), strip)
	var m policy.Match
	ok := false
	if len(entries) > 0 {
		m, ok = dom.Match(entries)
	}
	ok = ok && m.Rule != nil
	keyEntries := entries
	if ok && len(m.KeyEntries) > 0 {
		keyEntries = m.KeyEntries
	}
	if terms, _ := overrideLimit(d.GetLimit()); d.GetLimit() != nil && terms.use {
		var rule *policy.Rule
		if ok {
			rule = m.Rule
		}
		p, key := overridePlan(rule, terms, s.overrideAlg, tenant, domain, keyEntries)
		p.metric = m.MetricID
		p.chargeOver = rule != nil && rule.ChargeOverLimit
		return p, key
	}
	switch {
	case !ok:
		return planned{outcome: envoy.OutcomeNoMatch}, ""
	case m.Rule.Unlimited:
		return planned{outcome: envoy.OutcomeUnlimited, rule: m.Rule}, ""
	case len(m.Rule.Limits) == 0:
		return planned{outcome: envoy.OutcomeNoMatch, rule: m.Rule}, ""
	}
	p := planned{
		rule:    m.Rule,
		metric:  m.MetricID,
		limits:  m.Rule.Limits,
		shadow:  m.Rule.ShadowMode,
		quota:   m.Rule.QuotaMode,
		blocked: m.Rule.Blocked,

		chargeOver: m.Rule.ChargeOverLimit,
	}
	return p, ratelimit.Key(tenant, domain, keyEntries)
}

// splitTenant converts the entries and, when strip is set and the first
// entry has the tenant key, takes that entry's value out as the tenant.
func (s *RLS) splitTenant(in []*commonrlv3.RateLimitDescriptor_Entry, strip bool) (string, []ratelimit.Entry) {
	entries := make([]ratelimit.Entry, len(in))
	for i, e := range in {
		entries[i] = ratelimit.Entry{Key: e.GetKey(), Value: e.GetValue()}
		if s.secret[e.GetKey()] {
			sum := sha256.Sum256([]byte(e.GetValue()))
			entries[i].Value = "sha256:" + hex.EncodeToString(sum[:])
		}
	}
	if strip && len(entries) > 0 && entries[0].Key == s.tenantKey {
		return entries[0].Value, entries[1:]
	}
	return "", entries
}

// overridePlan counts a descriptor under the limit Envoy sent with it
// instead of the configured ones, with the matched rule's first algorithm
// (alg when no rule matched) and its consistency. As in envoyproxy/ratelimit the override
// applies whether or not a rule matched, shadow mode is off, and the
// descriptor neither replaces nor is replaced. The override is part of the
// key, so a changed override starts a fresh budget instead of inheriting a
// state counted under other terms. An override of 0 requests blocks, as a
// rule's requests_per_unit: 0 does.
func overridePlan(rule *policy.Rule, o overrideTerms, alg ratelimit.Algorithm,
	tenant, domain string, keyEntries []ratelimit.Entry) (planned, string) {
	period := o.period
	l := ratelimit.Limit{Algorithm: alg.OrDefault(), Requests: o.requests, Period: period}
	name := "override"
	if rule != nil {
		if len(rule.Limits) > 0 {
			l.Algorithm = rule.Limits[0].Algorithm.OrDefault()
			l.Consistency = rule.Limits[0].Consistency
		}
		name = ruleName(rule)
	}
	l.Name = name
	// '#' is always escaped inside key parts, so no descriptor value can
	// produce this suffix.
	key := ratelimit.Key(tenant, domain, keyEntries) +
		fmt.Sprintf("|#override=%s/%d/%dms", l.Algorithm, l.Requests, period.Milliseconds())
	p := planned{rule: rule, override: true, limits: []ratelimit.Limit{l}, blocked: o.requests == 0}
	return p, key
}

// applyReplaces drops every counted descriptor whose rule is named (by its
// own name or one of its limits' names, see policy.Rule.Named) in the
// replaces list of another matched rule of the same request. As in
// envoyproxy/ratelimit, unlimited rules may replace too, and overrides take
// no part.
func applyReplaces(items []planned) {
	var replaced []string
	for _, it := range items {
		if it.rule != nil && !it.override {
			replaced = append(replaced, it.rule.Replaces...)
		}
	}
	if len(replaced) == 0 {
		return
	}
	for i := range items {
		it := &items[i]
		if !it.counted() || it.override {
			continue
		}
		for _, name := range replaced {
			if it.rule.Named(name) {
				it.outcome = envoy.OutcomeReplaced
				break
			}
		}
	}
}

// ruleName is the name a rule's limits are reported under when they have
// none of their own: its rate_limit name, else its ID.
func ruleName(r *policy.Rule) string {
	switch {
	case r.Name != "":
		return r.Name
	case r.ID != "":
		return r.ID
	}
	return "descriptor"
}
