package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// envoyproxy/ratelimit's settings ("the peer's", src/settings/settings.go),
// translated onto ours so that extauthz starts where the peer's deployment
// (Envoy Gateway's) runs it with nothing else changed. Nothing below cmd/
// knows these names; docs/reference.md's "envoyproxy/ratelimit's settings"
// table lists the same rows (TestPeerTableMatchesDocs).

// peerClass says what extauthz does with one of the peer's variables.
type peerClass string

const (
	// peerMapped feeds the EXTAUTHZ_* variables of the peerMappings that
	// read it.
	peerMapped peerClass = "mapped"
	// peerWarned has no meaning here: set (to other than a harmless value),
	// extauthz starts and logs one warning line naming it.
	peerWarned peerClass = "warned"
	// peerRefused would change decisions if ignored: set (to other than a
	// harmless value), extauthz refuses to start with one line.
	peerRefused peerClass = "refused"
	// peerXDS belongs to limits over xDS (CONFIG_TYPE=GRPC_XDS_SOTW), refused
	// until this build has the xDS client (xdsInThisBuild).
	peerXDS peerClass = "xDS"
)

// xdsInThisBuild turns on the xDS rows' mapping (peerXDSMapping) once the
// xDS client and its EXTAUTHZ_POLICY_SOURCE, EXTAUTHZ_XDS_* variables exist.
const xdsInThisBuild = false

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
	{name: "XDS_CLIENT_BACKOFF_RANDOM_FACTOR", class: peerXDS},
	{name: "XDS_CLIENT_BACKOFF_JITTER", class: peerXDS},
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
	{name: "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", class: peerRefused, why: "extauthz counts hits past the limit; later decisions would differ", harmless: isFalse},
	{name: "LIMIT_RESPONSE_HEADERS_ENABLED", class: peerWarned, why: "extauthz's rate-limit response headers are set in the policy, not the environment", harmless: isFalse},
	{name: "LIMIT_LIMIT_HEADER", class: peerWarned, why: "extauthz's rate-limit response headers are set in the policy, not the environment"},
	{name: "LIMIT_REMAINING_HEADER", class: peerWarned, why: "extauthz's rate-limit response headers are set in the policy, not the environment"},
	{name: "LIMIT_RESET_HEADER", class: peerWarned, why: "extauthz's rate-limit response headers are set in the policy, not the environment"},
	{name: "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", class: peerWarned, why: "extauthz's /healthcheck fails until a policy is loaded, always", harmless: isTrue},
	{name: "REDIS_SOCKET_TYPE", class: peerMapped},
	{name: "REDIS_TYPE", class: peerMapped},
	{name: "REDIS_URL", class: peerMapped},
	{name: "REDIS_POOL_SIZE", class: peerMapped},
	{name: "REDIS_AUTH", class: peerMapped},
	{name: "REDIS_TLS", class: peerMapped},
	{name: "REDIS_TLS_CLIENT_CERT", class: peerRefused, why: "extauthz has no Redis client certificate yet; a Redis that requires one would refuse every connection and the failure mode would decide"},
	{name: "REDIS_TLS_CLIENT_KEY", class: peerRefused, why: "extauthz has no Redis client certificate yet; a Redis that requires one would refuse every connection and the failure mode would decide"},
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

// peerLookup reads the peer's variables.
type peerLookup func(string) (string, bool)

// or returns the variable's value, or def when it is unset.
func (p peerLookup) or(name, def string) string {
	if v, ok := p(name); ok {
		return v
	}
	return def
}

// flag reads a boolean of the peer's; unset is false and a bad value is an
// error naming it.
func (p peerLookup) flag(name string) (bool, error) {
	v, ok := p(name)
	if !ok {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s=%q: want true or false", name, v)
	}
	return b, nil
}

// peerMapping computes EXTAUTHZ_* values (to, without the prefix) from the
// peer's variables it reads (from); it returns only the values it sets.
type peerMapping struct {
	from []string
	to   []string
	fn   func(p peerLookup) (map[string]string, error)
}

// copyAs maps one variable onto one of ours unchanged, when set.
func copyAs(from, to string) peerMapping {
	return peerMapping{[]string{from}, []string{to}, func(p peerLookup) (map[string]string, error) {
		if v, ok := p(from); ok {
			return map[string]string{to: v}, nil
		}
		return nil, nil
	}}
}

var peerMappings = []peerMapping{
	// The peer always listens, on its defaults when unset: Envoy Gateway
	// sets neither and expects gRPC on 8081 and /healthcheck on 8080.
	{[]string{"GRPC_HOST", "GRPC_PORT"}, []string{"GRPC_ADDR"}, func(p peerLookup) (map[string]string, error) {
		addr, err := peerAddr(p, "GRPC_HOST", "GRPC_PORT", "8081")
		return map[string]string{"GRPC_ADDR": addr}, err
	}},
	{[]string{"HOST", "PORT"}, []string{"HTTP_ADDR"}, func(p peerLookup) (map[string]string, error) {
		addr, err := peerAddr(p, "HOST", "PORT", "8080")
		return map[string]string{"HTTP_ADDR": addr}, err
	}},
	copyAs("GRPC_UDS", "GRPC_UDS"),
	// The peer reads its TLS files only with GRPC_SERVER_USE_TLS=true. The
	// client CA is GRPC_CLIENT_TLS_CACERT in its settings.go, but Envoy
	// Gateway sets GRPC_SERVER_TLS_CA_CERT: either makes it mutual TLS.
	whenTrue("GRPC_SERVER_USE_TLS", []string{"GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY"}, []string{"GRPC_TLS_CERT", "GRPC_TLS_KEY"},
		func(p peerLookup) map[string]string {
			return map[string]string{"GRPC_TLS_CERT": p.or("GRPC_SERVER_TLS_CERT", ""), "GRPC_TLS_KEY": p.or("GRPC_SERVER_TLS_KEY", "")}
		}),
	whenTrue("GRPC_SERVER_USE_TLS", []string{"GRPC_CLIENT_TLS_CACERT", "GRPC_SERVER_TLS_CA_CERT"}, []string{"GRPC_TLS_CLIENT_CA"},
		func(p peerLookup) map[string]string {
			return setOnly("GRPC_TLS_CLIENT_CA", p.or("GRPC_CLIENT_TLS_CACERT", p.or("GRPC_SERVER_TLS_CA_CERT", "")))
		}),
	whenTrue("GRPC_SERVER_USE_TLS", []string{"GRPC_CLIENT_TLS_SAN"}, []string{"GRPC_TLS_CLIENT_SANS"},
		func(p peerLookup) map[string]string {
			return setOnly("GRPC_TLS_CLIENT_SANS", p.or("GRPC_CLIENT_TLS_SAN", ""))
		}),
	{[]string{"LOG_LEVEL"}, []string{"LOG_LEVEL"}, peerLogLevel},
	{[]string{"CONFIG_TYPE", "RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY"}, []string{"CONFIG"}, peerPolicyDir},
	{[]string{"USE_PROMETHEUS", "PROMETHEUS_ADDR"}, []string{"METRICS_ADDR"}, func(p peerLookup) (map[string]string, error) {
		on, err := p.flag("USE_PROMETHEUS")
		if !on || err != nil {
			return nil, err
		}
		return map[string]string{"METRICS_ADDR": p.or("PROMETHEUS_ADDR", ":9090")}, nil
	}},
	{[]string{"LOCAL_CACHE_SIZE_IN_BYTES"}, []string{"LOCAL_CACHE"}, func(p peerLookup) (map[string]string, error) {
		v, ok := p("LOCAL_CACHE_SIZE_IN_BYTES")
		if !ok {
			return nil, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("LOCAL_CACHE_SIZE_IN_BYTES=%q: want 0 (off) or a size in bytes", v)
		}
		return map[string]string{"LOCAL_CACHE": strconv.FormatBool(n > 0)}, nil
	}},
	copyAs("NEAR_LIMIT_RATIO", "NEAR_LIMIT_RATIO"),
	{[]string{"CACHE_KEY_PREFIX"}, []string{"KEY_PREFIX"}, func(p peerLookup) (map[string]string, error) {
		if v := p.or("CACHE_KEY_PREFIX", ""); v != "" { // the peer's default is empty, ours "xa"
			return map[string]string{"KEY_PREFIX": v}, nil
		}
		return nil, nil
	}},
	{[]string{"REDIS_SOCKET_TYPE", "REDIS_TYPE", "REDIS_URL", "REDIS_AUTH", "REDIS_TLS"},
		[]string{"REDIS_URL", "REDIS_CLUSTER", "REDIS_SENTINEL_ADDRS", "REDIS_SENTINEL_MASTER"}, peerRedis},
	// The peer applies these only with REDIS_TLS=true, as ours apply only to
	// rediss://. It sets InsecureSkipVerify for the second: no verification
	// at all, as ours.
	whenTrue("REDIS_TLS", []string{"REDIS_TLS_CACERT"}, []string{"REDIS_TLS_CA_FILE"},
		func(p peerLookup) map[string]string {
			return setOnly("REDIS_TLS_CA_FILE", p.or("REDIS_TLS_CACERT", ""))
		}),
	whenTrue("REDIS_TLS", []string{"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"}, []string{"REDIS_TLS_INSECURE_SKIP_VERIFY"},
		func(p peerLookup) map[string]string {
			return setOnly("REDIS_TLS_INSECURE_SKIP_VERIFY", p.or("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", ""))
		}),
	copyAs("REDIS_POOL_SIZE", "REDIS_POOL_SIZE"),
	{[]string{"REDIS_SENTINEL_AUTH"}, []string{"REDIS_SENTINEL_PASSWORD"}, func(p peerLookup) (map[string]string, error) {
		v, ok := p("REDIS_SENTINEL_AUTH")
		if !ok {
			return nil, nil
		}
		if strings.Contains(v, ":") {
			return nil, errors.New("REDIS_SENTINEL_AUTH=(redacted): a sentinel user (user:password) is not supported, only a password")
		}
		return map[string]string{"REDIS_SENTINEL_PASSWORD": v}, nil
	}},
	copyAs("REDIS_TIMEOUT", "REDIS_DIAL_TIMEOUT"),
	copyAs("SHADOW_MODE", "SHADOW_MODE"),
	copyAs("QUOTA_MODE", "QUOTA_MODE"),
	copyAs("RESPONSE_DYNAMIC_METADATA", "RESPONSE_DYNAMIC_METADATA"),
	copyAs("MERGE_DOMAIN_CONFIG", "MERGE_DOMAINS"),
	{[]string{"TRACING_ENABLED", "OTEL_EXPORTER_OTLP_ENDPOINT", "TRACING_EXPORTER_PROTOCOL"}, []string{"OTLP_ENDPOINT", "OTLP_PROTOCOL"}, peerTracing},
	whenTrue("TRACING_ENABLED", []string{"TRACING_SAMPLING_RATE"}, []string{"TRACE_SAMPLE_RATIO"},
		func(p peerLookup) map[string]string {
			return setOnly("TRACE_SAMPLE_RATIO", p.or("TRACING_SAMPLING_RATE", ""))
		}),
}

// whenTrue maps variables that the peer reads only when its flag is true.
func whenTrue(flag string, from, to []string, fn func(peerLookup) map[string]string) peerMapping {
	return peerMapping{append([]string{flag}, from...), to, func(p peerLookup) (map[string]string, error) {
		on, err := p.flag(flag)
		if !on || err != nil {
			return nil, err
		}
		return fn(p), nil
	}}
}

// setOnly is {name: v}, or nothing when v is empty.
func setOnly(name, v string) map[string]string {
	if v == "" {
		return nil
	}
	return map[string]string{name: v}
}

// peerAddr joins the peer's host and port variables.
func peerAddr(p peerLookup, hostVar, portVar, defPort string) (string, error) {
	port := p.or(portVar, defPort)
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return "", fmt.Errorf("%s=%q: want a port 0-65535", portVar, port)
	}
	return net.JoinHostPort(p.or(hostVar, "0.0.0.0"), port), nil
}

// peerLogLevel maps logrus's levels (the peer's, any case) onto ours.
func peerLogLevel(p peerLookup) (map[string]string, error) {
	v, ok := p("LOG_LEVEL")
	if !ok {
		return nil, nil
	}
	levels := map[string]string{"trace": "debug", "debug": "debug", "info": "info", "warn": "warn", "warning": "warn",
		"error": "error", "fatal": "error", "panic": "error"}
	level, ok := levels[strings.ToLower(v)]
	if !ok {
		return nil, fmt.Errorf("LOG_LEVEL=%q: want trace, debug, info, warn, error, fatal or panic", v)
	}
	return map[string]string{"LOG_LEVEL": level}, nil
}

// peerPolicyDir: with CONFIG_TYPE=FILE the peer reads its limits from
// $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/$RUNTIME_APPDIRECTORY.
func peerPolicyDir(p peerLookup) (map[string]string, error) {
	switch t := p.or("CONFIG_TYPE", "FILE"); strings.ToUpper(t) {
	case "FILE":
		return map[string]string{"CONFIG": filepath.Join(p.or("RUNTIME_ROOT", "/srv/runtime_data/current"),
			p.or("RUNTIME_SUBDIRECTORY", ""), p.or("RUNTIME_APPDIRECTORY", "config"))}, nil
	case "GRPC_XDS_SOTW":
		if !xdsInThisBuild {
			return nil, errors.New("CONFIG_TYPE=GRPC_XDS_SOTW: limits over xDS are not in this build yet; " +
				"set CONFIG_TYPE=FILE with the limits in $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/$RUNTIME_APPDIRECTORY, or EXTAUTHZ_CONFIG")
		}
		return peerXDSMapping(p)
	default:
		return nil, fmt.Errorf("CONFIG_TYPE=%q: want FILE or GRPC_XDS_SOTW", t)
	}
}

// peerXDSMapping is CONFIG_TYPE=GRPC_XDS_SOTW's translation, the one
// place to finish when the xDS client is merged (with xdsInThisBuild, the
// peerXDS rows' class and docs/reference.md's table).
func peerXDSMapping(p peerLookup) (map[string]string, error) {
	out := map[string]string{
		"POLICY_SOURCE":       "xds",
		"XDS_SERVER_URL":      p.or("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000"),
		"XDS_NODE_ID":         p.or("CONFIG_GRPC_XDS_NODE_ID", "default"),
		"XDS_SERVER_USE_TLS":  p.or("CONFIG_GRPC_XDS_SERVER_USE_TLS", "false"),
		"XDS_CLIENT_TLS_CERT": p.or("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", ""),
		"XDS_CLIENT_TLS_KEY":  p.or("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", ""),
		"XDS_SERVER_TLS_CA":   p.or("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", ""),
		"XDS_FORCE_START":     p.or("FORCE_START_WITHOUT_INITIAL_CONFIG", "false"),
	}
	return out, nil
}

// peerRedis builds our Redis URL from the peer's host:port form (a list
// for a cluster; master name then sentinels for Sentinel), REDIS_TLS and
// REDIS_AUTH ("password" or "user:password").
func peerRedis(p peerLookup) (map[string]string, error) {
	addrs, ok := p("REDIS_URL")
	if !ok {
		return nil, nil // our in-memory store (the peer has no such mode)
	}
	if st := p.or("REDIS_SOCKET_TYPE", "unix"); !strings.EqualFold(st, "tcp") {
		return nil, fmt.Errorf("REDIS_SOCKET_TYPE=%q (unix is the peer's default): extauthz reaches Redis over TCP only; set REDIS_SOCKET_TYPE=tcp with REDIS_URL=host:port", st)
	}
	tls, err := p.flag("REDIS_TLS")
	if err != nil {
		return nil, err
	}
	u := url.URL{Scheme: "redis"}
	if tls {
		u.Scheme = "rediss"
	}
	if auth, ok := p("REDIS_AUTH"); ok && auth != "" {
		if user, pass, found := strings.Cut(auth, ":"); found {
			u.User = url.UserPassword(user, pass)
		} else {
			u.User = url.UserPassword("", auth)
		}
	}
	hosts := splitList(addrs)
	switch t := p.or("REDIS_TYPE", "SINGLE"); strings.ToUpper(t) {
	case "SINGLE":
		if len(hosts) != 1 {
			return nil, fmt.Errorf("REDIS_URL=%q: want one host:port with REDIS_TYPE=SINGLE", addrs)
		}
		u.Host = hosts[0]
		return map[string]string{"REDIS_URL": u.String()}, nil
	case "CLUSTER":
		if len(hosts) == 0 {
			return nil, fmt.Errorf("REDIS_URL=%q: want host:port[,host:port...] with REDIS_TYPE=CLUSTER", addrs)
		}
		u.Host = hosts[0]
		q := url.Values{}
		for _, h := range hosts[1:] {
			q.Add("addr", h)
		}
		u.RawQuery = q.Encode()
		return map[string]string{"REDIS_URL": u.String(), "REDIS_CLUSTER": "true"}, nil
	case "SENTINEL":
		if len(hosts) < 2 {
			return nil, fmt.Errorf("REDIS_URL=%q: want master-name,sentinel:port[,sentinel:port...] with REDIS_TYPE=SENTINEL", addrs)
		}
		u.Path = "/0" // no host: the sentinels name the master
		return map[string]string{"REDIS_URL": u.String(), "REDIS_SENTINEL_MASTER": hosts[0],
			"REDIS_SENTINEL_ADDRS": strings.Join(hosts[1:], ",")}, nil
	default:
		return nil, fmt.Errorf("REDIS_TYPE=%q: want SINGLE, CLUSTER or SENTINEL", t)
	}
}

// peerTracing: with TRACING_ENABLED=true the peer exports over OTLP
// (http by default) to OTEL_EXPORTER_OTLP_ENDPOINT, or the SDK's default.
func peerTracing(p peerLookup) (map[string]string, error) {
	on, err := p.flag("TRACING_ENABLED")
	if !on || err != nil {
		return nil, err
	}
	proto, port := "http/protobuf", "4318"
	switch v := p.or("TRACING_EXPORTER_PROTOCOL", "http"); strings.ToLower(v) {
	case "http":
	case "grpc":
		proto, port = "grpc", "4317"
	default:
		return nil, fmt.Errorf("TRACING_EXPORTER_PROTOCOL=%q: want http or grpc", v)
	}
	endpoint := p.or("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:"+port)
	if !strings.Contains(endpoint, "://") {
		endpoint = "http://" + endpoint // as Envoy Gateway writes it
	}
	return map[string]string{"OTLP_ENDPOINT": endpoint, "OTLP_PROTOCOL": proto}, nil
}

func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// peerMarkers are peer-only names whose presence means "configured as the
// peer" even when the binary is not started as ratelimit. Generic names
// (PORT, LOG_LEVEL, REDIS_URL) are not: a pod may hold them for others.
var peerMarkers = []string{"CONFIG_TYPE", "RUNTIME_ROOT", "USE_STATSD"}

// peerMode reports whether the peer's names apply: started as ratelimit
// (Envoy Gateway runs /bin/ratelimit), or a marker set.
func peerMode(argv0 string, lookup peerLookup) bool {
	if path.Base(filepath.ToSlash(argv0)) == "ratelimit" {
		return true
	}
	return slices.ContainsFunc(peerMarkers, func(name string) bool { _, ok := lookup(name); return ok })
}

// peerEnv translates the peer's variables: our variables (without the
// EXTAUTHZ_ prefix) with what each came from, one warning line per
// variable with no meaning here, and one error line per refused one.
type peerEnv struct {
	values   map[string]string
	from     map[string][]string
	warnings []string
	refusals []error
}

func translatePeer(lookup peerLookup) peerEnv {
	e := peerEnv{values: map[string]string{}, from: map[string][]string{}}
	for _, v := range peerVars {
		val, ok := lookup(v.name)
		if !ok || v.harmless != nil && v.harmless(val) {
			continue
		}
		switch v.class {
		case peerWarned:
			e.warnings = append(e.warnings, fmt.Sprintf("%s is ignored: %s", v.name, v.why))
		case peerRefused:
			e.refusals = append(e.refusals, fmt.Errorf("%s=%q: refused: %s", v.name, val, v.why))
		}
	}
	for _, m := range peerMappings {
		if slices.IndexFunc(m.to, func(name string) bool { _, ok := lookup("EXTAUTHZ_" + name); return !ok }) < 0 {
			continue // ours give every one of its variables
		}
		out, err := m.fn(lookup)
		if err != nil {
			if !slices.ContainsFunc(e.refusals, func(r error) bool { return r.Error() == err.Error() }) { // a flag two mappings read
				e.refusals = append(e.refusals, err)
			}
			continue
		}
		for k, val := range out {
			e.values[k] = val
			e.from[k] = m.from
		}
	}
	return e
}

// envWithPeer reads EXTAUTHZ_* variables from lookup and, where unset,
// from the peer's translated ones: our names win when both are given.
func envWithPeer(lookup func(string) (string, bool), peer peerEnv) func(string) (string, bool) {
	return func(name string) (string, bool) {
		if v, ok := lookup(name); ok {
			return v, true
		}
		v, ok := peer.values[strings.TrimPrefix(name, "EXTAUTHZ_")]
		return v, ok && strings.HasPrefix(name, "EXTAUTHZ_")
	}
}

// annotate names, on each line of err about one of our variables that a
// peer's variable set, where its value came from.
func (e peerEnv) annotate(err error) error {
	if err == nil || len(e.from) == 0 {
		return err
	}
	lines := strings.Split(err.Error(), "\n")
	for i, line := range lines {
		name, _, _ := strings.Cut(strings.TrimPrefix(line, "EXTAUTHZ_"), "=")
		if from, ok := e.from[name]; ok && strings.HasPrefix(line, "EXTAUTHZ_") {
			lines[i] = fmt.Sprintf("%s (from envoyproxy/ratelimit's %s)", line, strings.Join(from, ", "))
		}
	}
	return errors.New(strings.Join(lines, "\n"))
}

// peerTargets lists, sorted, our variables (with the prefix) that name
// feeds: the "extauthz" column of docs/reference.md's table.
func peerTargets(name string) []string {
	var out []string
	for _, m := range peerMappings {
		if slices.Contains(m.from, name) {
			for _, to := range m.to {
				out = append(out, "EXTAUTHZ_"+to)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
