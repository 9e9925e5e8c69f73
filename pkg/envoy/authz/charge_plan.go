package authz

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/policy"
)

// MetadataCharge is the field of envoy.ExtAuthzNamespace under which
// ext_authz hands a request's charged limits to ext_proc:
//
//	charge:
//	  route:  the policy route's name
//	  tier:   the caller's tier ("" without tier_limits)
//	  limits: [{name, index, key, reserved}]  each charged limit whose key
//	          resolved: its name and index in the route's (tier's) list, its
//	          counting key, and the hits reserved up front
//
// ext_proc charges each from the response. A limit whose name no longer
// matches its index (a reload) is skipped.
const MetadataCharge = "charge"

const (
	mdChargeRoute    = "route"
	mdChargeTier     = "tier"
	mdChargeLimits   = "limits"
	mdChargeName     = "name"
	mdChargeIndex    = "index"
	mdChargeKey      = "key"
	mdChargeReserved = "reserved"
)

// chargeEntry is one charged limit of a request, under its counting key.
type chargeEntry struct {
	limit    *policy.ChargedLimit
	index    int    // in the route's (tier's) charged list
	key      string // the counting key (and the lockout's)
	reserved int64  // hits charged with the check: at least 1 (see planCharges)
}

// chargePlan is what a request's response will be charged with.
type chargePlan struct {
	route, tier string
	entries     []chargeEntry
}

// plan resolves the charged limits of route for a caller: each under
// its keys (charger.keysOf), with what its check reserves: a cost limit's
// reservation, at least 1, an outcome limit's one hit (refunded when the
// status does not count), so that the check and the charge are one store
// step. scope is the caller's
// (limitScope); body is the request body as far as read. refused, when
// set, ends the request: a key that could not be read is refused by the
// policy's choice (the plan still lists the other limits' keys, for
// explain).
func (c *charger) plan(scope string, route *policy.Route, in callerInput, body keyBody) (p chargePlan, refused *reply) {
	charged, tier := route.ChargedFor(tierValue(route.Tiers, in))
	p = chargePlan{route: route.Name, tier: tier}
	for i, cl := range charged {
		keys, r := c.keysOf(scope, route.Name, tier, cl, in, body)
		if refused == nil {
			refused = r
		}
		for _, key := range keys {
			p.entries = append(p.entries, chargeEntry{limit: cl, index: i, key: key, reserved: max(reservation(cl, in.headers), 1)})
		}
	}
	return p, refused
}

// scopeShared is the scope of a charged limit's key shared by every caller
// (an address, an account): like the other scopes it starts with scopeMark,
// so no tenant header value can name it.
const scopeShared = "~shared"

// reservation is what a cost limit charges up front: the reserve header's
// number, else its default, capped at the limit (more would only lock the
// caller out of a budget it cannot spend in one request anyway).
func reservation(c *policy.ChargedLimit, hs headerList) int64 {
	r := c.Charge.Reserve
	if r == nil {
		return 0
	}
	n, ok := int64(0), false
	if r.Header != "" {
		n, ok = parseCost(headerValue(hs, r.Header))
	}
	if !ok {
		n = r.Default
	}
	return min(n, c.Limit.Requests)
}

// needsBody reports whether a route's charged limits read the request
// body for a key.
func needsBody(route *policy.Route) bool {
	for _, c := range allCharged(route) {
		if c.Charge.Key.NeedsBody() {
			return true
		}
	}
	return false
}

// toValue renders the plan for the handoff.
func (p chargePlan) toValue() *structpb.Value {
	limits := make([]*structpb.Value, len(p.entries))
	for i, e := range p.entries {
		limits[i] = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			mdChargeName:     structpb.NewStringValue(e.limit.Limit.Name),
			mdChargeIndex:    structpb.NewNumberValue(float64(e.index)),
			mdChargeKey:      structpb.NewStringValue(e.key),
			mdChargeReserved: structpb.NewNumberValue(float64(e.reserved)),
		}})
	}
	return structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
		mdChargeRoute:  structpb.NewStringValue(p.route),
		mdChargeTier:   structpb.NewStringValue(p.tier),
		mdChargeLimits: structpb.NewListValue(&structpb.ListValue{Values: limits}),
	}})
}

// chargePlanFrom reads ext_authz's charge handoff against the stream's
// policy: found is false when there is none. Entries that no longer match
// a charged limit of the route (a reload renamed or moved it) or are
// malformed are dropped: nothing is charged for them.
func chargePlanFrom(md *corev3.Metadata, pol *policy.HTTP) (p chargePlan, found bool) {
	v := md.GetFilterMetadata()[envoy.ExtAuthzNamespace].GetFields()[MetadataCharge]
	if v == nil {
		return p, false
	}
	f := v.GetStructValue().GetFields()
	p.route, p.tier = f[mdChargeRoute].GetStringValue(), f[mdChargeTier].GetStringValue()
	charged := chargedOf(pol, p.route, p.tier)
	for _, lv := range f[mdChargeLimits].GetListValue().GetValues() {
		lf := lv.GetStructValue().GetFields()
		idx := lf[mdChargeIndex].GetNumberValue()
		i := int(idx)
		if float64(i) != idx || i < 0 || i >= len(charged) || charged[i].Limit.Name != lf[mdChargeName].GetStringValue() {
			continue
		}
		key, reserved := lf[mdChargeKey].GetStringValue(), lf[mdChargeReserved].GetNumberValue()
		if key == "" || reserved < 0 || reserved > float64(charged[i].Limit.Requests) {
			continue
		}
		p.entries = append(p.entries, chargeEntry{limit: charged[i], index: i, key: key, reserved: int64(reserved)})
	}
	return p, true
}

// chargedOf is the charged list of a route's tier in pol; nil when gone.
func chargedOf(pol *policy.HTTP, route, tier string) []*policy.ChargedLimit {
	if pol == nil {
		return nil
	}
	for _, r := range pol.Routes {
		if r.Name != route {
			continue
		}
		if tier == "" {
			return r.Charged
		}
		if r.Tiers != nil {
			return r.Tiers.Charged[tier]
		}
	}
	return nil
}
