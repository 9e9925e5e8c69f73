package main

import (
	"github.com/extauthz/extauthz/pkg/envoy/rls"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// How the RLS counts. envoyproxy/ratelimit's users (Envoy Gateway, AI
// Gateway) rely on its counting: every hit charged, past the limit too,
// in fixed windows; a token budget charged at stream end only trips so.
// Where they configure us their way, that is the default: started as the
// peer, its translation sets EXTAUTHZ_RLS_CHARGE (from
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT) and EXTAUTHZ_RLS_DEFAULT_ALGORITHM;
// with limits over xDS, the empty values resolve to the same. Elsewhere
// our own defaults stay: a denied request charges nothing, gcra. Either
// is an explicit choice with the two variables.

// peerUsers reports whether the empty RLS settings resolve to the peer's
// counting: limits come over xDS, as only the peer's users send them.
func (c Config) peerUsers() bool { return c.policySourceKind() == sourceXDS }

func (c Config) validRLSCharge() bool {
	_, err := rls.ParseCharging(c.RLSCharge)
	return c.RLSCharge == "" || err == nil
}

// rlsCharging resolves EXTAUTHZ_RLS_CHARGE (validated).
func (c Config) rlsCharging() rls.Charging {
	if c.RLSCharge == "" {
		if c.peerUsers() {
			return rls.ChargeAlways
		}
		return rls.ChargeIfAdmitted
	}
	ch, _ := rls.ParseCharging(c.RLSCharge)
	return ch
}

// descriptorAlgorithm resolves EXTAUTHZ_RLS_DEFAULT_ALGORITHM (validated).
func (c Config) descriptorAlgorithm() ratelimit.Algorithm {
	if c.RLSDefaultAlgorithm == "" {
		if c.peerUsers() {
			return ratelimit.FixedWindow
		}
		return ratelimit.GCRA
	}
	return ratelimit.Algorithm(c.RLSDefaultAlgorithm)
}
