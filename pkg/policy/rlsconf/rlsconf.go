// Package rlsconf translates the RateLimitConfig resources that
// envoyproxy/ratelimit takes over xDS (go-control-plane's ratelimit module,
// type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig) into
// policy documents in that service's YAML format, which policy.LoadDocuments
// then validates exactly like files. It decides nothing about validity: an
// unknown unit becomes a unit the validation names and rejects.
package rlsconf

import (
	"fmt"
	"strings"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.yaml.in/yaml/v3"

	"github.com/extauthz/extauthz/pkg/policy"
)

// TypeURL is the xDS type of the resources this package translates.
const TypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// document is one domain in envoyproxy/ratelimit's YAML format.
type document struct {
	Domain      string       `yaml:"domain"`
	Descriptors []descriptor `yaml:"descriptors,omitempty"`
}

type descriptor struct {
	Key            string         `yaml:"key"`
	Value          string         `yaml:"value,omitempty"`
	RateLimit      *rateLimit     `yaml:"rate_limit,omitempty"`
	Descriptors    []descriptor   `yaml:"descriptors,omitempty"`
	ShadowMode     bool           `yaml:"shadow_mode,omitempty"`
	DetailedMetric bool           `yaml:"detailed_metric,omitempty"`
	QuotaMode      bool           `yaml:"quota_mode,omitempty"`
	Metadata       map[string]any `yaml:"metadata,omitempty"`
}

type rateLimit struct {
	Unit            string    `yaml:"unit,omitempty"`
	RequestsPerUnit *uint32   `yaml:"requests_per_unit,omitempty"`
	Unlimited       bool      `yaml:"unlimited,omitempty"`
	Name            string    `yaml:"name,omitempty"`
	Replaces        []replace `yaml:"replaces,omitempty"`
}

type replace struct {
	Name string `yaml:"name"`
}

// DocumentName is the name a resource's problems are reported under.
func DocumentName(c *rlsconfv3.RateLimitConfig) string {
	return "xds:RateLimitConfig/" + c.GetName()
}

// Documents translates configs into policy documents, one per resource, in
// the order given.
func Documents(configs []*rlsconfv3.RateLimitConfig) ([]policy.Document, error) {
	docs := make([]policy.Document, 0, len(configs))
	for _, c := range configs {
		data, err := yaml.Marshal(document{Domain: c.GetDomain(), Descriptors: descriptors(c.GetDescriptors())})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", DocumentName(c), err)
		}
		docs = append(docs, policy.Document{Name: DocumentName(c), Data: data})
	}
	return docs, nil
}

// Load translates configs and validates them as one policy.
func Load(configs []*rlsconfv3.RateLimitConfig, opts policy.LoadOptions) (*policy.Policy, error) {
	docs, err := Documents(configs)
	if err != nil {
		return nil, err
	}
	return policy.LoadDocuments(docs, opts)
}

func descriptors(in []*rlsconfv3.RateLimitDescriptor) []descriptor {
	if len(in) == 0 {
		return nil
	}
	out := make([]descriptor, len(in))
	for i, d := range in {
		out[i] = descriptor{
			Key:            d.GetKey(),
			Value:          d.GetValue(),
			RateLimit:      limit(d.GetRateLimit()),
			Descriptors:    descriptors(d.GetDescriptors()),
			ShadowMode:     d.GetShadowMode(),
			DetailedMetric: d.GetDetailedMetric(),
			QuotaMode:      d.GetQuotaMode(),
		}
		if md := d.GetMetadata(); md != nil {
			out[i].Metadata = md.AsMap()
		}
	}
	return out
}

// limit maps a policy. An unlimited one carries no unit or count unless the
// sender set them (then validation reports the conflict); a counted one
// always carries both, UNKNOWN included, so that validation names it.
func limit(p *rlsconfv3.RateLimitPolicy) *rateLimit {
	if p == nil {
		return nil
	}
	rl := &rateLimit{Unlimited: p.GetUnlimited(), Name: p.GetName()}
	for _, r := range p.GetReplaces() {
		rl.Replaces = append(rl.Replaces, replace{Name: r.GetName()})
	}
	unit, rpu := p.GetUnit(), p.GetRequestsPerUnit()
	if !rl.Unlimited || unit != rlsconfv3.RateLimitUnit_UNKNOWN {
		rl.Unit = strings.ToLower(unit.String())
	}
	if !rl.Unlimited || rpu != 0 {
		rl.RequestsPerUnit = &rpu
	}
	return rl
}
