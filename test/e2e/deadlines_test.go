package e2e

import "strings"

// The deadlines of a stack without shippedDeadlines: extauthz's Redis calls
// (and the idempotency store's) get loadedRedisDeadline, and Envoy's calls to
// extauthz loadedCallDeadline, above it so that extauthz still answers
// first when Redis does fail.
const (
	loadedRedisDeadline = "2s"
	loadedCallDeadline  = "10s"
)

// loadedDeadlines are the replicas' variables for loadedRedisDeadline.
func loadedDeadlines() []string {
	var env []string
	for _, v := range []string{"REDIS_CALL_TIMEOUT", "REDIS_READ_TIMEOUT", "REDIS_WRITE_TIMEOUT", "REDIS_DIAL_TIMEOUT", "IDEMPOTENCY_STORE_TIMEOUT"} {
		env = append(env, "EXTAUTHZ_"+v+"="+loadedRedisDeadline)
	}
	return env
}

// stretchDeadlines sets every deadline of a call to extauthz under v (an
// HTTP connection manager: its filters and its routes' per-filter
// configurations) to d, and returns how many it set. Route timeouts (the
// upstream's) are left alone.
func stretchDeadlines(v any, d string) int {
	n := 0
	switch v := v.(type) {
	case map[string]any:
		if t, _ := v["@type"].(string); strings.HasSuffix(t, ".ratelimit.v3.RateLimit") && v["timeout"] != nil {
			v["timeout"] = d // the ratelimit filter's
			n++
		}
		if gs, _ := v["grpc_service"].(map[string]any); gs != nil && gs["timeout"] != nil {
			gs["timeout"] = d // ext_authz's Check deadline
			n++
		}
		if v["message_timeout"] != nil {
			v["message_timeout"] = d // ext_proc's, per message
			n++
		}
		for _, c := range v {
			n += stretchDeadlines(c, d)
		}
	case []any:
		for _, c := range v {
			n += stretchDeadlines(c, d)
		}
	}
	return n
}
