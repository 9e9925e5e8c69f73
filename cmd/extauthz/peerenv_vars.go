package main

import (
	"slices"
	"strconv"
	"strings"
)

// The peer's variables, one row each (docs/reference.md's table).

// peerVar is one of the peer's variables.
type peerVar struct {
	name  string
	class peerClass
	// why, for warned and refused rows, is the reason the line gives.
	why string
	// harmless, when not nil, accepts the values of a warned or refused row
	// that mean what extauthz does anyway (USE_STATSD=false): no line.
	harmless func(v string) bool
}

func isFalse(v string) bool { b, err := strconv.ParseBool(v); return err == nil && !b }
func isTrue(v string) bool  { b, err := strconv.ParseBool(v); return err == nil && b }
func is(want ...string) func(string) bool {
	return func(v string) bool { return slices.Contains(want, strings.ToLower(v)) }
}

const (
	whyStatsd   = "extauthz exports Prometheus metrics on /metrics only, no statsd sink"
	whyMemcache = "extauthz keeps counters in Redis or in memory, not memcache"
	whyPerSec   = "has no meaning without REDIS_PERSECOND=true, which is refused"
	whyPipeline = "extauthz coalesces concurrent calls per Redis node itself (EXTAUTHZ_REDIS_MAX_BATCH)"
	whyStartup  = "extauthz starts without Redis and reports it on /readyz until it answers"
	whyJitter   = "extauthz spreads each reconnect pause over [d/2, d] itself (EXTAUTHZ_XDS_BACKOFF_MIN, _MAX)"
	whyHeaders  = "extauthz's rate-limit response headers are the policy's header_style (docs/policy.md)"
)

// peerVars lists every variable of the peer's settings.go, in its order,
// plus GRPC_SERVER_TLS_CA_CERT, the name Envoy Gateway sets for the client CA.
var peerVars = []peerVar{
	{name: "HOST", class: peerMapped},
	{name: "PORT", class: peerMapped},
	{name: "DEBUG_HOST", class: peerWarned, why: "the peer's debug listener; extauthz's pprof is EXTAUTHZ_DEBUG_ADDR, loopback only"},
	{name: "DEBUG_PORT", class: peerWarned, why: "the peer's debug listener; extauthz's pprof is EXTAUTHZ_DEBUG_ADDR, loopback only"},
	{name: "GRPC_UDS", class: peerMapped},
	{name: "GRPC_HOST", class: peerMapped},
	{name: "GRPC_PORT", class: peerMapped},
	{name: "GRPC_MAX_CONNECTION_AGE", class: peerWarned, why: "extauthz does not age out gRPC connections"},
	{name: "GRPC_MAX_CONNECTION_AGE_GRACE", class: peerWarned, why: "extauthz does not age out gRPC connections"},
	{name: "GRPC_SERVER_USE_TLS", class: peerMapped},
	{name: "GRPC_SERVER_TLS_CERT", class: peerMapped},
	{name: "GRPC_SERVER_TLS_KEY", class: peerMapped},
	{name: "GRPC_CLIENT_TLS_CACERT", class: peerMapped},
	{name: "GRPC_SERVER_TLS_CA_CERT", class: peerMapped},
	{name: "GRPC_CLIENT_TLS_SAN", class: peerMapped},
	{name: "LOG_LEVEL", class: peerMapped},
	{name: "LOG_FORMAT", class: peerWarned, why: "extauthz logs JSON only", harmless: is("json")},
	{name: "CONFIG_TYPE", class: peerMapped},
	{name: "FORCE_START_WITHOUT_INITIAL_CONFIG", class: peerXDS},
	{name: "CONFIG_GRPC_XDS_NODE_ID", class: peerXDS},
	{name: "CONFIG_GRPC_XDS_NODE_METADATA", class: peerXDS},
	{name: "CONFIG_GRPC_XDS_SERVER_URL", class: peerXDS},
	{name: "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", class: peerXDS},
	{name: "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", class: peerXDS},
	{name: "CONFIG_GRPC_XDS_SERVER_USE_TLS", class: peerXDS},
	{name: "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", class: peerXDS},
	{name: "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", class: peerXDS},
	{name: "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", class: peerXDS},
	{name: "CONFIG_GRPC_XDS_SERVER_TLS_SAN", class: peerXDS},
	{name: "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", class: peerXDS},
	{name: "XDS_CLIENT_BACKOFF_MAX_INTERVAL", class: peerXDS},
	{name: "XDS_CLIENT_BACKOFF_RANDOM_FACTOR", class: peerWarned, why: whyJitter},
	{name: "XDS_CLIENT_BACKOFF_JITTER", class: peerWarned, why: whyJitter},
	{name: "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", class: peerXDS},
	{name: "USE_DOG_STATSD", class: peerWarned, why: whyStatsd, harmless: isFalse},
	{name: "USE_DOG_STATSD_MOGRIFIERS", class: peerWarned, why: whyStatsd},
	{name: "USE_STATSD", class: peerWarned, why: whyStatsd, harmless: isFalse},
	{name: "STATSD_HOST", class: peerWarned, why: whyStatsd},
	{name: "STATSD_PORT", class: peerWarned, why: whyStatsd},
	{name: "EXTRA_TAGS", class: peerWarned, why: whyStatsd},
	{name: "STATS_FLUSH_INTERVAL", class: peerWarned, why: whyStatsd},
	{name: "DISABLE_STATS", class: peerWarned, why: "extauthz always serves /metrics", harmless: isFalse},
	{name: "USE_PROMETHEUS", class: peerMapped},
	{name: "PROMETHEUS_ADDR", class: peerMapped},
	{name: "PROMETHEUS_PATH", class: peerWarned, why: "extauthz serves its metrics on /metrics only", harmless: is("/metrics")},
	{name: "PROMETHEUS_MAPPER_YAML", class: peerWarned, why: "extauthz's metrics have their own names (docs/reference.md#metrics), not the peer's statsd names"},
	{name: "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", class: peerWarned, why: "extauthz's metrics have their own names and units (docs/reference.md#metrics)"},
	{name: "RUNTIME_ROOT", class: peerMapped},
	{name: "RUNTIME_SUBDIRECTORY", class: peerMapped},
	{name: "RUNTIME_APPDIRECTORY", class: peerMapped},
	{name: "RUNTIME_IGNOREDOTFILES", class: peerWarned, why: "extauthz always skips dot files in the policy directory", harmless: isTrue},
	// Both ways the directory is watched: its files, and Kubernetes' ..data symlink swap.
	{name: "RUNTIME_WATCH_ROOT", class: peerWarned, why: "extauthz watches the policy directory, both ways", harmless: func(string) bool { return true }},
	{name: "EXPIRATION_JITTER_MAX_SECONDS", class: peerWarned, why: "extauthz's Redis keys expire with their window"},
	{name: "LOCAL_CACHE_SIZE_IN_BYTES", class: peerMapped},
	{name: "NEAR_LIMIT_RATIO", class: peerMapped},
	{name: "CACHE_KEY_PREFIX", class: peerMapped},
	{name: "BACKEND_TYPE", class: peerRefused, why: "extauthz keeps counters in Redis (or in memory for one replica), not memcache", harmless: is("redis")},
	{name: "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", class: peerMapped},
	{name: "LIMIT_RESPONSE_HEADERS_ENABLED", class: peerWarned, why: whyHeaders, harmless: isFalse},
	{name: "LIMIT_LIMIT_HEADER", class: peerWarned, why: whyHeaders},
	{name: "LIMIT_REMAINING_HEADER", class: peerWarned, why: whyHeaders},
	{name: "LIMIT_RESET_HEADER", class: peerWarned, why: whyHeaders},
	{name: "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", class: peerWarned, why: "extauthz's /healthcheck fails until a policy is loaded, always", harmless: isTrue},
	{name: "REDIS_SOCKET_TYPE", class: peerMapped},
	{name: "REDIS_TYPE", class: peerMapped},
	{name: "REDIS_URL", class: peerMapped},
	{name: "REDIS_POOL_SIZE", class: peerMapped},
	{name: "REDIS_AUTH", class: peerMapped},
	{name: "REDIS_TLS", class: peerMapped},
	{name: "REDIS_TLS_CLIENT_CERT", class: peerMapped},
	{name: "REDIS_TLS_CLIENT_KEY", class: peerMapped},
	{name: "REDIS_TLS_CACERT", class: peerMapped},
	{name: "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", class: peerMapped},
	{name: "REDIS_PIPELINE_WINDOW", class: peerWarned, why: whyPipeline},
	{name: "REDIS_PIPELINE_LIMIT", class: peerWarned, why: whyPipeline},
	{name: "REDIS_CLUSTER_PIPELINE_PARALLELISM", class: peerWarned, why: whyPipeline},
	{name: "REDIS_PERSECOND", class: peerRefused, why: "extauthz keeps every limit in one Redis; per-second limits would not go to the second one", harmless: isFalse},
	{name: "REDIS_PERSECOND_SOCKET_TYPE", class: peerWarned, why: whyPerSec},
	{name: "REDIS_PERSECOND_TYPE", class: peerWarned, why: whyPerSec},
	{name: "REDIS_PERSECOND_URL", class: peerWarned, why: whyPerSec},
	{name: "REDIS_PERSECOND_POOL_SIZE", class: peerWarned, why: whyPerSec},
	{name: "REDIS_PERSECOND_AUTH", class: peerWarned, why: whyPerSec},
	{name: "REDIS_PERSECOND_TLS", class: peerWarned, why: whyPerSec},
	{name: "REDIS_SENTINEL_AUTH", class: peerMapped},
	{name: "REDIS_PERSECOND_SENTINEL_AUTH", class: peerWarned, why: whyPerSec},
	{name: "REDIS_PERSECOND_PIPELINE_WINDOW", class: peerWarned, why: whyPerSec},
	{name: "REDIS_PERSECOND_PIPELINE_LIMIT", class: peerWarned, why: whyPerSec},
	{name: "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", class: peerWarned, why: whyPerSec},
	{name: "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", class: peerWarned, why: "extauthz's /readyz always reports Redis; /healthcheck never does", harmless: isFalse},
	{name: "REDIS_TIMEOUT", class: peerMapped},
	{name: "REDIS_PERSECOND_TIMEOUT", class: peerWarned, why: whyPerSec},
	{name: "REDIS_POOL_ON_EMPTY_BEHAVIOR", class: peerWarned, why: "extauthz's pool waits up to the call timeout, then the failure mode answers"},
	{name: "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", class: peerWarned, why: whyPerSec},
	{name: "REDIS_STARTUP_INITIAL_INTERVAL", class: peerWarned, why: whyStartup},
	{name: "REDIS_STARTUP_MAX_INTERVAL", class: peerWarned, why: whyStartup},
	{name: "REDIS_STARTUP_MAX_ELAPSED_TIME", class: peerWarned, why: whyStartup},
	{name: "MEMCACHE_HOST_PORT", class: peerWarned, why: whyMemcache},
	{name: "MEMCACHE_MAX_IDLE_CONNS", class: peerWarned, why: whyMemcache},
	{name: "MEMCACHE_SRV", class: peerWarned, why: whyMemcache},
	{name: "MEMCACHE_SRV_REFRESH", class: peerWarned, why: whyMemcache},
	{name: "MEMCACHE_TLS", class: peerWarned, why: whyMemcache},
	{name: "MEMCACHE_TLS_CLIENT_CERT", class: peerWarned, why: whyMemcache},
	{name: "MEMCACHE_TLS_CLIENT_KEY", class: peerWarned, why: whyMemcache},
	{name: "MEMCACHE_TLS_CACERT", class: peerWarned, why: whyMemcache},
	{name: "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", class: peerWarned, why: whyMemcache},
	{name: "SHADOW_MODE", class: peerMapped},
	{name: "QUOTA_MODE", class: peerMapped},
	{name: "RESPONSE_DYNAMIC_METADATA", class: peerMapped},
	{name: "MERGE_DOMAIN_CONFIG", class: peerMapped},
	{name: "TRACING_ENABLED", class: peerMapped},
	{name: "TRACING_SERVICE_NAME", class: peerWarned, why: "set OTEL_SERVICE_NAME for extauthz's service.name"},
	{name: "TRACING_SERVICE_NAMESPACE", class: peerWarned, why: "set OTEL_RESOURCE_ATTRIBUTES=service.namespace=... instead"},
	{name: "TRACING_SERVICE_INSTANCE_ID", class: peerWarned, why: "set OTEL_RESOURCE_ATTRIBUTES=service.instance.id=... instead"},
	{name: "TRACING_EXPORTER_PROTOCOL", class: peerMapped},
	{name: "TRACING_SAMPLING_RATE", class: peerMapped},
	// The OpenTelemetry SDK's variable, which the peer's exporter reads.
	{name: "OTEL_EXPORTER_OTLP_ENDPOINT", class: peerMapped},
}
