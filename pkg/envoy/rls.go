package envoy

import (
	"context"
	"errors"
	"reflect"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/extauthz/extauthz/pkg/policy"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// DefaultTenantKey is the descriptor entry key read as the tenant unless
// WithTenantKey says otherwise.
const DefaultTenantKey = "tenant"

// PolicySource hands out the current policy snapshot; *policy.Watcher is one.
// Current may return nil (nothing loaded): every descriptor is then unmatched.
type PolicySource interface {
	Current() *policy.Policy
}

// PolicyFunc adapts a function to PolicySource.
type PolicyFunc func() *policy.Policy

// Current returns f().
func (f PolicyFunc) Current() *policy.Policy { return f() }

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
	policies  PolicySource
	metrics   *Metrics
	tenantKey string
	mode      rlsMode
}

// RLSOption configures NewRLS.
type RLSOption func(*RLS)

// WithTenantKey sets the descriptor entry key read as the tenant (default
// DefaultTenantKey); the empty key disables tenant extraction. When a
// descriptor's first entry has this key and the domain's policy has no
// top-level descriptor with it, the entry's value is the tenant: it scopes
// the counters (ratelimit.Key's tenant part) and is left out of matching, so
// one rule serves every tenant with separate budgets. When the policy does
// have such a top-level key, the entry is matched like any other, as
// envoyproxy/ratelimit would.
func WithTenantKey(key string) RLSOption {
	return func(s *RLS) { s.tenantKey = key }
}

// NewRLS returns an RLS deciding with store under the policies' current
// snapshot, reporting to metrics.
func NewRLS(store ratelimit.Store, policies PolicySource, metrics *Metrics, opts ...RLSOption) (*RLS, error) {
	switch {
	case isNil(store):
		return nil, errors.New("envoy: NewRLS: nil store")
	case isNil(policies):
		return nil, errors.New("envoy: NewRLS: nil policy source")
	case metrics == nil:
		return nil, errors.New("envoy: NewRLS: nil metrics")
	}
	s := &RLS{store: store, policies: policies, metrics: metrics, tenantKey: DefaultTenantKey}
	for _, o := range opts {
		if o != nil {
			o(s)
		}
	}
	return s, nil
}

// isNil reports whether v is nil or an interface holding a nil pointer or func.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Func, reflect.Map, reflect.Interface, reflect.Slice, reflect.Chan:
		return rv.IsNil()
	}
	return false
}

// Register registers the server on r (a *grpc.Server).
func (s *RLS) Register(r grpc.ServiceRegistrar) {
	rlsv3.RegisterRateLimitServiceServer(r, s)
}

// ShouldRateLimit answers one RLS call. A malformed request is
// codes.InvalidArgument; a store failure is codes.Unavailable (Envoy then
// applies its failure_mode_deny setting).
func (s *RLS) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	start := time.Now()
	defer func() { s.metrics.Latency(APIRateLimit, time.Since(start)) }()

	if bad := validateRLS(req); bad != nil {
		s.metrics.Invalid(APIRateLimit, bad.reason)
		return nil, status.Error(codes.InvalidArgument, bad.msg)
	}
	dom := s.domain(req.GetDomain())
	label, mode := UnknownDomain, s.mode
	if dom != nil {
		label, mode.style = dom.Name, dom.HeaderStyle
	}
	items, reqs := s.plan(dom, req)
	decisions, err := s.decide(ctx, reqs)
	if err != nil {
		for range items {
			s.metrics.Decision(APIRateLimit, label, OutcomeError)
		}
		return nil, storeError(ctx, err)
	}
	resp := respond(items, decisions, mode)
	if mode.metadata {
		resp.DynamicMetadata = responseMetadata(req, items, resp)
	}
	for _, it := range items {
		s.metrics.Decision(APIRateLimit, label, it.outcome)
	}
	s.metrics.countRules(items, decisions)
	return resp, nil
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
	decisions, err := s.store.AllowBatch(ctx, reqs)
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
	return decisions, nil
}

// storeError maps a store failure to a gRPC status: the caller's own
// cancellation or deadline as such, anything else as Unavailable.
func storeError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	return status.Errorf(codes.Unavailable, "rate limit store: %v", err)
}
