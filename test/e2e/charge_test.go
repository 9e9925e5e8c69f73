package e2e

// chargeScenarios are the limits charged after the fact (issue 31): by
// outcome (failed logins), by cost (tokens in the reply), and Envoy's RLS
// pattern for costs known at the end of a stream.
var chargeScenarios = []scenario{
	{"rls_metered_stream_done", testMeteredRLS},
}
