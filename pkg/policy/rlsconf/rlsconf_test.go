package rlsconf_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/extauthz/extauthz/pkg/policy"
	"github.com/extauthz/extauthz/pkg/policy/rlsconf"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// gatewayConfig is shaped like Envoy Gateway's translator output
// (testdata/out/ratelimit-config/multiple-domains.yaml): a listener domain,
// route and rule descriptors with key == value, the limit at the leaf.
func gatewayConfig(rpu uint32, unit rlsconfv3.RateLimitUnit) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{
		Name:   "first-listener",
		Domain: "first-listener",
		Descriptors: []*rlsconfv3.RateLimitDescriptor{{
			Key: "second-route", Value: "second-route",
			Descriptors: []*rlsconfv3.RateLimitDescriptor{{
				Key: "test-namespace/test-policy-2/rule/0", Value: "test-namespace/test-policy-2/rule/0",
				Descriptors: []*rlsconfv3.RateLimitDescriptor{{
					Key: "rule-0-match-0", Value: "rule-0-match-0",
					RateLimit: &rlsconfv3.RateLimitPolicy{RequestsPerUnit: rpu, Unit: unit},
				}},
			}},
		}},
	}
}

func leaf(t *testing.T, p *policy.Policy) *policy.Rule {
	t.Helper()
	d := p.Domain("first-listener")
	if d == nil {
		t.Fatalf("domain first-listener missing; domains %v", p.Domains)
	}
	m, ok := d.Match([]ratelimit.Entry{
		{Key: "second-route", Value: "second-route"},
		{Key: "test-namespace/test-policy-2/rule/0", Value: "test-namespace/test-policy-2/rule/0"},
		{Key: "rule-0-match-0", Value: "rule-0-match-0"},
	})
	if !ok {
		t.Fatal("the gateway's descriptor matches no rule")
	}
	return m.Rule
}

func TestLoadTranslatesAGatewayConfig(t *testing.T) {
	t.Parallel()
	p, err := rlsconf.Load([]*rlsconfv3.RateLimitConfig{gatewayConfig(5, rlsconfv3.RateLimitUnit_SECOND)}, policy.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := leaf(t, p)
	if got := r.Limits[0]; got.Requests != 5 || got.Period != time.Second {
		t.Errorf("limit = %d per %s, want 5 per 1s", got.Requests, got.Period)
	}
}

func TestLoadRejectsAnUnknownUnitNamingResourceAndField(t *testing.T) {
	t.Parallel()
	_, err := rlsconf.Load([]*rlsconfv3.RateLimitConfig{gatewayConfig(5, rlsconfv3.RateLimitUnit_UNKNOWN)}, policy.LoadOptions{})
	if !errors.Is(err, policy.ErrInvalid) {
		t.Fatalf("err = %v, want ErrInvalid", err)
	}
	want := "xds:RateLimitConfig/first-listener: descriptors[0].descriptors[0].descriptors[0].rate_limit.unit: unknown unit"
	if !strings.HasPrefix(err.Error(), want) {
		t.Errorf("err = %q, want it to start with %q", err, want)
	}
}

func TestLoadMapsEveryField(t *testing.T) {
	t.Parallel()
	cfg := &rlsconfv3.RateLimitConfig{Name: "r", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "k", Value: "open", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true}},
		{Key: "k", Value: "week", ShadowMode: true, DetailedMetric: true,
			RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_WEEK, RequestsPerUnit: 7, Name: "weekly"}},
		{Key: "k", Value: "day",
			RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_DAY, RequestsPerUnit: 1,
				Replaces: []*rlsconfv3.RateLimitReplace{{Name: "weekly"}}}},
		{Key: "k", Value: "block", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_HOUR}},
	}}
	p, err := rlsconf.Load([]*rlsconfv3.RateLimitConfig{cfg}, policy.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d := p.Domain("d")
	match := func(v string) *policy.Rule {
		m, _ := d.Match([]ratelimit.Entry{{Key: "k", Value: v}})
		return m.Rule
	}
	if r := match("open"); r == nil || !r.Unlimited {
		t.Errorf("open: %+v, want unlimited", r)
	}
	if r := match("week"); r == nil || !r.ShadowMode || !r.DetailedMetric || r.Limits[0].Period != 7*24*time.Hour || !r.Named("weekly") {
		t.Errorf("week: %+v, want a shadow, detailed 7/week rule named weekly", r)
	}
	if r := match("day"); r == nil || len(r.Replaces) != 1 {
		t.Errorf("day: %+v, want one replaces", r)
	}
	if r := match("block"); r == nil || !r.Blocked {
		t.Errorf("block: %+v, want block-all (requests_per_unit 0)", r)
	}
}

func TestLoadRejectsAnUnlimitedPolicyWithACount(t *testing.T) {
	t.Parallel()
	cfg := &rlsconfv3.RateLimitConfig{Name: "r", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true, RequestsPerUnit: 3}},
	}}
	_, err := rlsconf.Load([]*rlsconfv3.RateLimitConfig{cfg}, policy.LoadOptions{})
	if err == nil || !strings.Contains(err.Error(), "rate_limit.requests_per_unit: must not be set when unlimited is true") {
		t.Errorf("err = %v, want the unlimited conflict named", err)
	}
}

func TestLoadRejectsADomainSentTwiceUnlessMerged(t *testing.T) {
	t.Parallel()
	a := &rlsconfv3.RateLimitConfig{Name: "a", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "x", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 1}}}}
	b := &rlsconfv3.RateLimitConfig{Name: "b", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "y", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 1}}}}
	if _, err := rlsconf.Load([]*rlsconfv3.RateLimitConfig{a, b}, policy.LoadOptions{}); err == nil {
		t.Error("two resources of one domain loaded without MergeDomains")
	}
	if _, err := rlsconf.Load([]*rlsconfv3.RateLimitConfig{a, b}, policy.LoadOptions{MergeDomains: true}); err != nil {
		t.Errorf("merged: %v", err)
	}
}

func TestLoadOfNoResourcesIsAnEmptyPolicy(t *testing.T) {
	t.Parallel()
	p, err := rlsconf.Load(nil, policy.LoadOptions{})
	if err != nil || len(p.Domains) != 0 {
		t.Errorf("Load(nil) = %v, %v; want an empty policy", p, err)
	}
}

func TestLoadMapsQuotaModeAndMetadata(t *testing.T) {
	t.Parallel()
	md, err := structpb.NewStruct(map[string]any{"tier": "gold", "weight": 2.0})
	if err != nil {
		t.Fatal(err)
	}
	cfg := &rlsconfv3.RateLimitConfig{Name: "r", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "k", QuotaMode: true, Metadata: md,
			RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MONTH, RequestsPerUnit: 100}},
	}}
	p, err := rlsconf.Load([]*rlsconfv3.RateLimitConfig{cfg}, policy.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m, ok := p.Domain("d").Match([]ratelimit.Entry{{Key: "k", Value: "any"}})
	if !ok || !m.Rule.QuotaMode || m.Rule.Metadata["tier"] != "gold" || m.Rule.Metadata["weight"] != 2.0 ||
		m.Rule.Limits[0].Period != 30*24*time.Hour {
		t.Errorf("rule %+v, want quota mode, metadata tier=gold weight=2 and 100 a (30-day) month", m.Rule)
	}
}

// TestLoadCountsFixedWindowsAsThePeer: RateLimitConfig carries no
// algorithm; loaded with the peer's default (as cmd/extauthz loads limits
// over xDS) each limit counts fixed windows, as envoyproxy/ratelimit does.
func TestLoadCountsFixedWindowsAsThePeer(t *testing.T) {
	t.Parallel()
	p, err := rlsconf.Load([]*rlsconfv3.RateLimitConfig{gatewayConfig(10, rlsconfv3.RateLimitUnit_MINUTE)},
		policy.LoadOptions{DescriptorAlgorithm: ratelimit.FixedWindow})
	if err != nil {
		t.Fatal(err)
	}
	if got := leaf(t, p).Limits[0]; got.Algorithm != ratelimit.FixedWindow || got.Requests != 10 || got.Period != time.Minute {
		t.Errorf("limit %+v, want fixed_window 10 per minute", got)
	}
}
