package main

import (
	"strings"
	"testing"

	"github.com/extauthz/extauthz/pkg/envoy/rls"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// The RLS counts as envoyproxy/ratelimit where its users configure us
// their way (started as the peer, or limits over xDS): every hit charged,
// past the limit too, unless STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true,
// in fixed windows. Our own defaults stay elsewhere, and either is an
// explicit choice that wins.
func TestRLSCountingDefaults(t *testing.T) {
	for name, c := range map[string]struct {
		argv0 string
		env   map[string]string
		alg   ratelimit.Algorithm
		ch    rls.Charging
	}{
		"ours from files":          {"extauthz", nil, ratelimit.GCRA, rls.ChargeIfAdmitted},
		"ours over xDS":            {"extauthz", map[string]string{"EXTAUTHZ_XDS_SERVER_URL": "xds:18000"}, ratelimit.FixedWindow, rls.ChargeAlways},
		"the peer from files":      {"ratelimit", nil, ratelimit.FixedWindow, rls.ChargeAlways},
		"the peer over xDS":        {"ratelimit", map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW"}, ratelimit.FixedWindow, rls.ChargeAlways},
		"the peer, increment off":  {"ratelimit", map[string]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "false"}, ratelimit.FixedWindow, rls.ChargeAlways},
		"the peer, stop when over": {"ratelimit", map[string]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true"}, ratelimit.FixedWindow, rls.ChargeStopWhenOverLimit},
		"ours opted in as the peer": {"ratelimit", map[string]string{"EXTAUTHZ_RLS_CHARGE": "if_admitted", "EXTAUTHZ_RLS_DEFAULT_ALGORITHM": "gcra"},
			ratelimit.GCRA, rls.ChargeIfAdmitted},
		"ours opted in over xDS": {"extauthz", map[string]string{"EXTAUTHZ_XDS_SERVER_URL": "xds:18000", "EXTAUTHZ_RLS_CHARGE": "if_admitted",
			"EXTAUTHZ_RLS_DEFAULT_ALGORITHM": "sliding_window"}, ratelimit.SlidingWindow, rls.ChargeIfAdmitted},
		"the peer's opted in from files": {"extauthz", map[string]string{"EXTAUTHZ_RLS_CHARGE": "always", "EXTAUTHZ_RLS_DEFAULT_ALGORITHM": "fixed_window"},
			ratelimit.FixedWindow, rls.ChargeAlways},
	} {
		t.Run(name, func(t *testing.T) {
			cfg, _, err := loadAs(t, c.argv0, c.env)
			if err != nil {
				t.Fatal(err)
			}
			if alg, ch := cfg.descriptorAlgorithm(), cfg.rlsCharging(); alg != c.alg || ch != c.ch {
				t.Errorf("algorithm %s, charge %v; want %s, %v", alg, ch, c.alg, c.ch)
			}
		})
	}
}

func TestRLSCountingRejectsBadValues(t *testing.T) {
	for env, want := range map[string]string{
		"EXTAUTHZ_RLS_CHARGE":                     "EXTAUTHZ_RLS_CHARGE=\"sometimes\": want empty, if_admitted, always or stop_when_over_limit",
		"EXTAUTHZ_RLS_DEFAULT_ALGORITHM":          "EXTAUTHZ_RLS_DEFAULT_ALGORITHM=\"sometimes\": want empty, gcra, sliding_log, sliding_window or fixed_window",
		"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=\"sometimes\": want true or false",
	} {
		_, _, err := loadAs(t, "ratelimit", map[string]string{env: "sometimes"})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s=sometimes: %v, want %q", env, err, want)
		}
	}
}
