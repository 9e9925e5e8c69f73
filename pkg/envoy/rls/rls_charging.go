package rls

import (
	"context"
	"fmt"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// Charging says which counted descriptors of a request are charged their
// hits (see WithCharging). Refunds (is_negative_hits) are given back in
// every mode.
type Charging uint8

// The charging modes. The zero value is extauthz's own.
const (
	// ChargeIfAdmitted charges a descriptor only when its limits admit its
	// hits: a denied request costs nothing. A rule's charge_over_limit
	// opts its descriptor into charging past the limit (see storeRequest).
	ChargeIfAdmitted Charging = iota
	// ChargeAlways is envoyproxy/ratelimit's counting: every descriptor is
	// charged its hits, past its limit too (the peer's INCRBY), and is
	// OVER_LIMIT when its count after the charge is above the limit. A
	// hits_addend of 0 checks without charging. A cost charged at stream
	// end (Envoy's apply_on_stream_done) then trips the budget for the
	// requests after it.
	ChargeAlways
	// ChargeStopWhenOverLimit is the peer's
	// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true: as ChargeAlways, but
	// when a descriptor of the request would go over its limit, the
	// descriptors that fit are not charged (the request is denied); the
	// ones over still are, as the peer's increment of them still runs. It
	// costs a second store round trip, as it does the peer.
	ChargeStopWhenOverLimit
)

// ParseCharging reads a mode by the name String gives it.
func ParseCharging(s string) (Charging, error) {
	for _, c := range []Charging{ChargeIfAdmitted, ChargeAlways, ChargeStopWhenOverLimit} {
		if c.String() == s {
			return c, nil
		}
	}
	return 0, fmt.Errorf("unknown charging %q (want if_admitted, always or stop_when_over_limit)", s)
}

// String names c as EXTAUTHZ_RLS_CHARGE spells it.
func (c Charging) String() string {
	switch c {
	case ChargeIfAdmitted:
		return "if_admitted"
	case ChargeAlways:
		return "always"
	case ChargeStopWhenOverLimit:
		return "stop_when_over_limit"
	}
	return fmt.Sprintf("Charging(%d)", uint8(c))
}

// WithCharging sets how descriptors are charged (default ChargeIfAdmitted).
func WithCharging(c Charging) Option {
	return func(s *RLS) { s.charging = c }
}

// WithDefaultAlgorithm sets the algorithm of a limit override whose
// descriptor matched no rule (default gcra). A policy's own limits carry
// their algorithm (policy.LoadOptions.DescriptorAlgorithm defaults them).
func WithDefaultAlgorithm(a ratelimit.Algorithm) Option {
	return func(s *RLS) { s.overrideAlg = a.OrDefault() }
}

// OutcomeRefunded is the outcome (the "outcome" label of
// extauthz_decisions_total) of a descriptor with is_negative_hits: its hits
// were given back (never below the empty state), and it is answered OK.
const OutcomeRefunded = "refunded"

// storeRequest is the store request of a counted descriptor under the
// server's charging. A refund is charged its negative hits whatever the
// mode (ratelimit.ChargeAlways floors it at the empty state). Under
// ChargeAlways (and the second step of ChargeStopWhenOverLimit, see
// decideStopping) every descriptor is charged past its limit, and 0 hits
// are a check. Under ChargeIfAdmitted, a charge_over_limit rule is charged
// whatever the decision: Envoy's apply_on_stream_done call carries a cost
// the request already ran up, which must land even past the limit, and
// which the server cannot tell from a request-time call. A hits_addend of
// 0 on such a rule is the request-time check of that pattern: "is one hit
// left?" (ratelimit.ChargeNever with Hits 1), refused once the budget is
// spent. Elsewhere 0 hits admit whatever is spent, a check of nothing.
func storeRequest(key string, p *planned, c Charging) ratelimit.Request {
	r := ratelimit.Request{Key: key, Limits: p.limits, Hits: p.hits}
	switch {
	case p.refund, c != ChargeIfAdmitted:
		r.Charge = ratelimit.ChargeAlways
	case !p.chargeOver:
	case p.hits == 0:
		r.Hits, r.Charge = 1, ratelimit.ChargeNever
	default:
		r.Charge = ratelimit.ChargeAlways
	}
	return r
}

// decideStopping decides reqs (all ChargeAlways, see storeRequest) the way
// of ChargeStopWhenOverLimit: a first batch checks every charge without
// writing; when none would go over, reqs are charged as they are.
// Otherwise the charges that would go over are made, and the others
// become checks (0 hits), so a denied request costs the limits it fits
// nothing. Refunds are never checked first, and always made.
func (s *RLS) decideStopping(ctx context.Context, reqs []ratelimit.Request) ([]ratelimit.Decision, error) {
	probe := make([]ratelimit.Request, 0, len(reqs))
	at := make([]int, 0, len(reqs))
	for i, r := range reqs {
		if r.Hits > 0 {
			r.Charge = ratelimit.ChargeNever
			probe, at = append(probe, r), append(at, i)
		}
	}
	if len(probe) == 0 {
		return s.store.AllowBatch(ctx, reqs)
	}
	checked, err := s.store.AllowBatch(ctx, probe)
	if err != nil {
		return nil, err
	}
	if len(checked) != len(probe) {
		return nil, errStoreReply
	}
	over := false
	for _, d := range checked {
		over = over || !d.Allowed
	}
	if !over {
		return s.store.AllowBatch(ctx, reqs)
	}
	final := make([]ratelimit.Request, len(reqs))
	copy(final, reqs)
	for j, i := range at {
		if checked[j].Allowed {
			final[i].Hits = 0
		}
	}
	return s.store.AllowBatch(ctx, final)
}
