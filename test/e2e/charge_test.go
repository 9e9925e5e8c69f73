package e2e

// chargeScenarios are the limits charged after the fact (issue 31): by
// outcome (failed logins), by cost (tokens in the reply), and Envoy's RLS
// pattern for costs known at the end of a stream.
var chargeScenarios = []scenario{
	{"rls_metered_stream_done", testMeteredRLS},
	{"login_failures_per_address", testLoginFailuresPerAddress},
	{"login_successes_never_count", testLoginSuccessesNeverCount},
	{"login_failures_per_account", testLoginFailuresPerAccount},
	{"login_lockout_grows", testLoginLockoutGrows},
	{"tokens_json_body", testTokensJSON},
	{"tokens_header", testTokensHeader},
	{"tokens_streamed_last_event", testTokensStreamed},
	{"tokens_concurrent_overshoot_bound", testTokensConcurrentOvershoot},
	{"tokens_replicas_share_exactly", testTokensReplicasShare},
}
