package authz

import (
	"context"
	"fmt"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// explainCharged reads the charged limits of ex.Route for a caller, as the
// request path checks them: each key's lockout, then its budget with a
// 0-hit decision (which charges and writes nothing). A locked key or a
// spent budget clears ex.Allowed. explain is given no body: a key read
// from the body does not resolve, and its limit is shown without one.
func (s *Authz) explainCharged(ctx context.Context, ex *Explanation, scope string, caller callerInput) error {
	if !ex.Route.HasCharged() {
		return nil
	}
	p, _ := s.charges.plan(scope, ex.Route, caller, keyBody{})
	charged, _ := ex.Route.ChargedFor(tierValue(ex.Route.Tiers, caller))
	keys := make(map[int]string, len(p.entries))
	for _, e := range p.entries {
		keys[e.index] = e.key
	}
	for i, c := range charged {
		st := ChargedState{Limit: c, Key: keys[i]}
		if st.Key != "" {
			if err := s.readCharged(ctx, &st); err != nil {
				return fmt.Errorf("charged limit %s: %w", c.Limit.Name, err)
			}
			ex.Allowed = ex.Allowed && st.LockedFor == 0 && st.Result.Remaining >= 1
		}
		ex.Charged = append(ex.Charged, st)
	}
	return nil
}

// readCharged fills st's lockout and budget state.
func (s *Authz) readCharged(ctx context.Context, st *ChargedState) error {
	if st.Limit.Charge.Lockout != nil {
		if s.charges.lockouts == nil {
			return errNoLockoutStore
		}
		left, err := s.charges.lockouts.Locked(ctx, st.Key)
		if err != nil {
			return err
		}
		st.LockedFor = left
	}
	decs, err := s.charges.limits.AllowBatch(ctx, []ratelimit.Request{{Key: st.Key, Limits: []ratelimit.Limit{st.Limit.Limit}}})
	if err != nil {
		return err
	}
	if len(decs) != 1 || len(decs[0].Results) != 1 {
		return fmt.Errorf("rate-limit store answered %d decisions for 1 request", len(decs))
	}
	st.Result = decs[0].Results[0]
	return nil
}
