package rlqs

import (
	"context"
	"maps"
	"math"

	"github.com/extauthz/extauthz/pkg/policy"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// Charge results, the "result" label of extauthz_rlqs_charges_total.
const (
	chargeCharged   = "charged"   // every request an Envoy reported admitting was counted
	chargeSaturated = "saturated" // more than the counter had left: it was filled
	chargeFailed    = "failed"    // the rate-limit store failed; the usage is not counted
)

// splitTenant takes the tenant entry out of a bucket ID as RLS takes it out
// of a descriptor (EXTAUTHZ_RLS_TENANT_KEY, when the domain has no rule of
// that key at its top level), so that the bucket {tenant: acme, route: x}
// and the RLS descriptor (tenant=acme, route=x) are one key and one budget.
func splitTenant(id map[string]string, tenantKey string, d *policy.Domain) (map[string]string, string) {
	tenant, ok := id[tenantKey]
	if tenantKey == "" || !ok || d.HasTopLevelKey(tenantKey) {
		return id, ""
	}
	rest := maps.Clone(id)
	delete(rest, tenantKey)
	return rest, tenant
}

// charge counts the requests an Envoy reports it admitted on its own
// against the rule's counter in the rate-limit store, the counter RLS and
// ext_authz decide on, so that their callers see the Envoys' usage (one
// budget). A report larger than what the counter has left fills it rather
// than being refused whole. Best effort: a failure is counted, and the
// assignments do not depend on it.
func (st *stream) charge(ctx context.Context, b *bucket, allowed uint64) {
	limits := st.s.opts.Limits
	if limits == nil || b.kind != kindShared || allowed == 0 || len(b.limits) == 0 {
		return
	}
	ctx, cancel := st.storeContext(ctx)
	defer cancel()
	req := ratelimit.Request{Key: b.storeKey, Limits: b.limits, Hits: int64(min(allowed, math.MaxInt32))}
	result := chargeCharged
	d, err := chargeOnce(ctx, limits, req)
	if err == nil && !d.Allowed {
		result = chargeSaturated
		if left := leftOf(d); left > 0 {
			req.Hits = left
			_, err = chargeOnce(ctx, limits, req)
		}
	}
	if err != nil {
		result = chargeFailed
		st.s.errLog.Print("rlqs: charging reported usage to the rate-limit store failed", "err", err)
	}
	st.s.metrics.charges.WithLabelValues(result).Inc()
}

func chargeOnce(ctx context.Context, s ratelimit.Store, req ratelimit.Request) (ratelimit.Decision, error) {
	if err := ctx.Err(); err != nil { // the report's deadline has passed
		return ratelimit.Decision{}, err
	}
	ds, err := s.AllowBatch(ctx, []ratelimit.Request{req})
	if err != nil {
		return ratelimit.Decision{}, err
	}
	if len(ds) != 1 {
		return ratelimit.Decision{}, errShortReply
	}
	return ds[0], nil
}

// leftOf is what every limit of a decision still admits.
func leftOf(d ratelimit.Decision) int64 {
	left := int64(math.MaxInt64)
	for _, r := range d.Results {
		left = min(left, r.Remaining)
	}
	if len(d.Results) == 0 {
		return 0
	}
	return left
}
