package rls

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/policy"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// DefaultTenantKey is the descriptor entry key read as the tenant unless
// WithTenantKey says otherwise.
const DefaultTenantKey = "tenant"

// RLS serves envoy.service.ratelimit.v3.RateLimitService: each descriptor of
// a ShouldRateLimit call is matched against its domain's policy and every
// counted descriptor is decided in one Store.AllowBatch call.
//
// Across descriptors the decisions are independent, as in
// envoyproxy/ratelimit: a descriptor within its limit is charged even when
// another descriptor of the same call is over its own. (Several limits of one
// descriptor are all-or-nothing: that is one ratelimit.Request.)
type RLS struct {
	rlsv3.UnimplementedRateLimitServiceServer

	store     ratelimit.Store
	policies  envoy.PolicySource
	metrics   *envoy.Metrics
	tenantKey string
	secret    map[string]bool
	anomalies envoy.SampledLog
	mode      rlsMode
	// charging and overrideAlg: see WithCharging, WithDefaultAlgorithm.
	charging    Charging
	overrideAlg ratelimit.Algorithm
}

// defaultSecretKeys are the descriptor entry keys whose values are hashed
// unless WithSecretKeys says otherwise: the API key of envoy/*.yaml's
// identity chain.
var defaultSecretKeys = []string{"api_key"}

// DefaultSecretKeys returns the descriptor entry keys hashed unless
// WithSecretKeys says otherwise (a copy: callers may append to it).
func DefaultSecretKeys() []string { return slices.Clone(defaultSecretKeys) }

// WithSecretKeys names descriptor entry keys whose values are credentials
// (API keys): each such value is replaced by "sha256:" and its hex SHA-256
// before matching, so the credential never reaches a counter key in Redis,
// a log line or a metric label (detailed_metric) in clear. Rules match such
// entries by key only (a per-value budget), which a hash serves equally.
func WithSecretKeys(keys ...string) Option {
	return func(s *RLS) {
		s.secret = map[string]bool{}
		for _, k := range keys {
			s.secret[k] = true
		}
	}
}

// Option configures NewRLS.
type Option func(*RLS)

// WithTenantKey sets the descriptor entry key read as the tenant (default
// DefaultTenantKey); the empty key disables tenant extraction. When a
// descriptor's first entry has this key and the domain's policy has no
// top-level descriptor with it, the entry's value is the tenant: it scopes
// the counters (ratelimit.Key's tenant part) and is left out of matching, so
// one rule serves every tenant with separate budgets. When the policy does
// have such a top-level key, the entry is matched like any other, as
// envoyproxy/ratelimit would.
func WithTenantKey(key string) Option {
	return func(s *RLS) { s.tenantKey = key }
}

// WithRLSLogger logs the requests decided by a fallback rule (see
// MaxDescriptors), at most one line per LogSampleInterval; nil (the
// default) logs nothing. The lines never hold descriptor bytes.
func WithRLSLogger(log *slog.Logger) Option {
	return func(s *RLS) { s.anomalies.Log = log }
}

// NewRLS returns an RLS deciding with store under the policies' current
// snapshot, reporting to metrics.
func NewRLS(store ratelimit.Store, policies envoy.PolicySource, metrics *envoy.Metrics, opts ...Option) (*RLS, error) {
	switch {
	case envoy.IsNil(store):
		return nil, errors.New("envoy: NewRLS: nil store")
	case envoy.IsNil(policies):
		return nil, errors.New("envoy: NewRLS: nil policy source")
	case metrics == nil:
		return nil, errors.New("envoy: NewRLS: nil metrics")
	}
	s := &RLS{store: store, policies: policies, metrics: metrics, tenantKey: DefaultTenantKey, overrideAlg: ratelimit.GCRA}
	WithSecretKeys(defaultSecretKeys...)(s)
	for _, o := range opts {
		if o != nil {
			o(s)
		}
	}
	return s, nil
}

// Register registers the server on r (a *grpc.Server).
func (s *RLS) Register(r grpc.ServiceRegistrar) {
	rlsv3.RegisterRateLimitServiceServer(r, s)
}

// ShouldRateLimit answers one RLS call. Every descriptor is decided,
// whatever its bytes: one the request bounds or its shape keep from being
// matched gets the outcome documented on MaxDescriptors and screen, and is
// counted in extauthz_invalid_requests_total. The only error is a store
// failure, codes.Unavailable (Envoy then applies its failure_mode_deny
// setting), or the caller's own cancellation or deadline (see envoy.StoreStatus).
func (s *RLS) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	start := time.Now()
	defer func() { s.metrics.Latency(envoy.APIRateLimit, time.Since(start)) }()

	dom := s.domain(req.GetDomain())
	label, mode := envoy.UnknownDomain, s.mode
	if dom != nil {
		label, mode.style = dom.Name, dom.HeaderStyle
	}
	fixed := make([]string, len(req.GetDescriptors()))
	s.report(label, req, screen(req, fixed))
	items, reqs := s.plan(dom, req, fixed)
	decisions, err := s.decide(ctx, reqs)
	if err != nil {
		for range items {
			s.metrics.Decision(envoy.APIRateLimit, label, envoy.OutcomeError)
		}
		return nil, envoy.StoreStatus(ctx, err)
	}
	resp := respond(items, decisions, mode)
	denyRejected(resp, items)
	if mode.metadata {
		resp.DynamicMetadata = responseMetadata(req, items, resp)
	}
	for _, it := range items {
		s.metrics.Decision(envoy.APIRateLimit, label, it.outcome)
	}
	countRules(s.metrics, items, decisions)
	return resp, nil
}

// report counts and logs the anomalies of one request.
func (s *RLS) report(domain string, req *rlsv3.RateLimitRequest, found []anomaly) {
	for _, a := range found {
		s.metrics.Invalid(envoy.APIRateLimit, a.reason)
	}
	if len(found) > 0 {
		a := found[0]
		s.anomalies.Print("rate limit request decided by a fallback rule",
			"domain", domain, "reason", a.reason, "anomalies", len(found), "first", describeAnomaly(a, req))
	}
}

// denyRejected answers the descriptors rejected by a bound OVER_LIMIT.
func denyRejected(resp *rlsv3.RateLimitResponse, items []planned) {
	for i, it := range items {
		if it.outcome == envoy.OutcomeRejected {
			resp.Statuses[i].Code = rlsv3.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
	}
}

func (s *RLS) domain(name string) *policy.Domain {
	p := s.policies.Current()
	if p == nil {
		return nil
	}
	return p.Domain(name)
}

// errStoreReply means the store answered with the wrong number of results.
var errStoreReply = errors.New("store returned a malformed reply")

// decide runs every counted descriptor through one AllowBatch call.
func (s *RLS) decide(ctx context.Context, reqs []ratelimit.Request) ([]ratelimit.Decision, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	var decisions []ratelimit.Decision
	var err error
	if s.charging == ChargeStopWhenOverLimit {
		decisions, err = s.decideStopping(ctx, reqs)
	} else {
		decisions, err = s.store.AllowBatch(ctx, reqs)
	}
	if err != nil {
		return nil, err
	}
	if len(decisions) != len(reqs) {
		return nil, errStoreReply
	}
	for i, d := range decisions {
		if len(d.Results) != len(reqs[i].Limits) {
			return nil, errStoreReply
		}
	}
	uncountChecks(reqs, decisions)
	return decisions, nil
}

// countRules records every counted descriptor of an answered RLS request
// (respond has set the outcomes) under its rule's metric ID.
func countRules(m *envoy.Metrics, items []planned, decisions []ratelimit.Decision) {
	for i := range items {
		it := &items[i]
		var dec ratelimit.Decision
		switch {
		case it.metric == "" || (it.outcome != envoy.OutcomeOK && it.outcome != envoy.OutcomeOverLimit && it.outcome != envoy.OutcomeShadow):
			continue
		case it.blocked:
			dec = blockedDecision(it.limits[0])
		default:
			dec = decisions[it.batch]
		}
		m.CountRule(envoy.APIRateLimit, it.metric, it.hits, dec, it.outcome == envoy.OutcomeShadow)
	}
}
