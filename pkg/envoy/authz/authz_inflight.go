package authz

import (
	"context"
	"errors"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/policy"
	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/inflight"
)

// Fields of the in-flight handoff (see envoy.MetadataInFlight).
const (
	mdSlotKey = "key"
	mdSlot    = "slot"
	mdSlotTTL = "ttl_ms"
)

var errNoInFlightStore = errors.New("route sets max_in_flight but no in-flight store is configured")

// slotHold is one max_in_flight slot taken by ext_authz for a request.
type slotHold struct {
	key  string
	slot inflight.Slot
	ttl  time.Duration
}

// inFlightKey is the key of a caller's slots on route: the route's
// rate-limit key convention (ratelimit.Key under the http domain), with an
// entry of its own so that it never names a rate-limit counter.
func inFlightKey(scope string, route *policy.Route) string {
	return ratelimit.Key(scope, httpLimitDomain, []ratelimit.Entry{{Key: "in_flight", Value: route.Name}})
}

// takeSlot takes one of route's max_in_flight slots for the caller under
// scope. It returns the slot (nil when the route sets no max_in_flight),
// or a 429 reply when every slot is taken; err is a store failure.
func (s *Authz) takeSlot(ctx context.Context, route *policy.Route, scope string) (*slotHold, *reply, error) {
	if route.MaxInFlight <= 0 {
		return nil, nil, nil
	}
	if s.inFlight == nil {
		s.metrics.InFlight(envoy.APIExtAuthz, envoy.InFlightError)
		return nil, nil, errNoInFlightStore
	}
	key := inFlightKey(scope, route)
	sctx, cancel := context.WithTimeout(ctx, s.gate.timeout)
	defer cancel()
	slot, res, err := s.inFlight.Acquire(sctx, key, route.MaxInFlight, route.InFlightTTL)
	switch {
	case err != nil:
		s.metrics.InFlight(envoy.APIExtAuthz, envoy.InFlightError)
		return nil, nil, err
	case !res.Acquired:
		s.metrics.InFlight(envoy.APIExtAuthz, envoy.InFlightOverLimit)
		r := problemTooManyInFlight(route.Name, route.MaxInFlight)
		return nil, withHeaders(r, envoy.InFlightHeaders(route.HeaderStyle, route.Name, route.MaxInFlight, res.RetryAfter)), nil
	}
	s.metrics.InFlight(envoy.APIExtAuthz, envoy.InFlightAcquired)
	return &slotHold{key: key, slot: slot, ttl: route.InFlightTTL}, nil, nil
}

// handSlot gives h to ext_proc in the response's dynamic metadata when a
// proceeds (the request goes on to its route); otherwise nothing will run
// (denied, or re-routed to extauthz's own replay endpoint), so the slot is
// released at once.
func (s *Authz) handSlot(ctx context.Context, a answer, h *slotHold) *authv3.CheckResponse {
	resp := a.resp
	if h == nil {
		return resp
	}
	if !a.proceeds {
		s.dropSlot(ctx, h)
		return resp
	}
	if resp.DynamicMetadata == nil {
		resp.DynamicMetadata = &structpb.Struct{Fields: map[string]*structpb.Value{}}
	}
	resp.DynamicMetadata.Fields[envoy.MetadataInFlight] = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
		mdSlotKey: structpb.NewStringValue(h.key),
		mdSlot:    structpb.NewStringValue(string(h.slot)),
		mdSlotTTL: structpb.NewNumberValue(float64(h.ttl.Milliseconds())),
	}})
	return resp
}

// dropSlot releases a slot whose request will not run. A failed release
// is bounded by the slot's ttl.
func (s *Authz) dropSlot(ctx context.Context, h *slotHold) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.gate.timeout)
	defer cancel()
	if _, err := s.inFlight.Release(ctx, h.key, h.slot); err != nil {
		s.metrics.InFlight(envoy.APIExtAuthz, envoy.InFlightError)
	}
}

// slotFrom reads ext_authz's in-flight handoff from ext_proc's
// metadata_context; nil when there is none or it is malformed (then no
// slot can be trusted; it frees after its ttl).
func slotFrom(md *corev3.Metadata) (*slotHold, bool) {
	v := md.GetFilterMetadata()[envoy.ExtAuthzNamespace].GetFields()[envoy.MetadataInFlight]
	if v == nil {
		return nil, true
	}
	f := v.GetStructValue().GetFields()
	ms := f[mdSlotTTL].GetNumberValue()
	h := &slotHold{key: f[mdSlotKey].GetStringValue(), slot: inflight.Slot(f[mdSlot].GetStringValue())}
	if ms >= 1 && ms <= float64(maxMetadataTTL.Milliseconds()) {
		h.ttl = time.Duration(ms) * time.Millisecond
	}
	if h.key == "" || h.slot == "" || inflight.CheckTTL(h.ttl) != nil {
		return nil, false
	}
	return h, true
}

// admit takes the route's in-flight slot, if it has max_in_flight and the
// request is not exempt (health checks never hold a caller's slot), then
// the Idempotency-Key decision, and hands the slot on with the answer. A
// store failure is an error, as for the rate-limit store: Envoy's
// failure_mode_allow decides (open: the request runs without a slot).
func (s *Authz) admit(ctx context.Context, route *policy.Route, r checkRequest, scope string, exempt bool, rl []*corev3.HeaderValue, charges *chargePlan) (*authv3.CheckResponse, error) {
	var slot *slotHold
	var over *reply
	var err error
	if !exempt {
		slot, over, err = s.takeSlot(ctx, route, scope)
	}
	switch {
	case err != nil:
		s.handCharges(ctx, answer{}, charges)
		s.metrics.Decision(envoy.APIExtAuthz, envoy.HTTPDomain, envoy.OutcomeError)
		return nil, envoy.StoreStatus(ctx, err)
	case over != nil:
		s.handCharges(ctx, answer{}, charges)
		s.metrics.Decision(envoy.APIExtAuthz, envoy.HTTPDomain, envoy.OutcomeOverLimit)
		return deniedResponse(codes.ResourceExhausted, over), nil
	}
	s.metrics.Decision(envoy.APIExtAuthz, envoy.HTTPDomain, envoy.OutcomeOK)
	a := s.idempotency(ctx, route, r, rl)
	s.handCharges(ctx, a, charges)
	return s.handSlot(ctx, a, slot), nil
}
