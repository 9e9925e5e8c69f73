package xdstest

import (
	"slices"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
)

// Envoy AI Gateway's QuotaPolicy role (envoyproxy/ai-gateway,
// internal/ratelimit/translator and runner): its controller serves a second
// rate-limit deployment over xDS, on port 18002 for the node
// AIGatewayNodeID, one domain for every backend. Envoy sends, per request,
// the descriptor [backend_name=<namespace>/<backend>,
// model_name_override=<model>] with hits_addend 1, then at stream done the
// same descriptor with hits_addend read from the quota_cost dynamic
// metadata (the tokens the reply used).
const (
	AIGatewayNodeID      = "envoy-ai-gateway-ratelimit"
	AIGatewayXDSPort     = 18002
	AIGatewayQuotaDomain = "ai-gateway-quota"
	AIGatewayBackendKey  = "backend_name"
	AIGatewayModelKey    = "model_name_override"
)

// AIGatewayQuota is the RateLimitConfig AI Gateway's translator emits for a
// QuotaPolicy with one per-model default bucket (limit per unit) on one
// AIServiceBackend (backend is "<namespace>/<name>"): the model's
// descriptor in quota mode under the backend's.
func AIGatewayQuota(backend string, models map[string]uint32, unit rlsconfv3.RateLimitUnit) *rlsconfv3.RateLimitConfig {
	var perModel []*rlsconfv3.RateLimitDescriptor
	for _, m := range sortedKeys(models) {
		perModel = append(perModel, &rlsconfv3.RateLimitDescriptor{
			Key: AIGatewayModelKey, Value: m, QuotaMode: true,
			RateLimit: &rlsconfv3.RateLimitPolicy{Unit: unit, RequestsPerUnit: models[m]},
		})
	}
	return &rlsconfv3.RateLimitConfig{
		Name:   AIGatewayQuotaDomain,
		Domain: AIGatewayQuotaDomain,
		Descriptors: []*rlsconfv3.RateLimitDescriptor{{
			Key: AIGatewayBackendKey, Value: backend, Descriptors: perModel,
		}},
	}
}

func sortedKeys(m map[string]uint32) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
