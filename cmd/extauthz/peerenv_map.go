package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/extauthz/extauthz/pkg/envoy/rls"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// The peer's variables translated onto ours.

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
	// Limits over xDS: the variables the peer reads with
	// CONFIG_TYPE=GRPC_XDS_SOTW, set only then (as the peer ignores them
	// otherwise), with the peer's defaults where ours differ.
	{[]string{"CONFIG_TYPE"}, []string{"POLICY_SOURCE"}, peerPolicySource},
	xdsVar("CONFIG_GRPC_XDS_SERVER_URL", "XDS_SERVER_URL", "localhost:18000"),
	xdsVar("CONFIG_GRPC_XDS_NODE_ID", "XDS_NODE_ID", "default"),
	{[]string{"CONFIG_GRPC_XDS_NODE_METADATA"}, []string{"XDS_NODE_METADATA"}, peerNodeMetadata},
	xdsVar("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "XDS_HEADERS", ""), // the same key:value,key:value form
	xdsVar("CONFIG_GRPC_XDS_SERVER_USE_TLS", "XDS_SERVER_USE_TLS", ""),
	xdsVar("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "XDS_CLIENT_TLS_CERT", ""),
	xdsVar("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "XDS_CLIENT_TLS_KEY", ""),
	xdsVar("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "XDS_SERVER_TLS_CA", ""),
	xdsVar("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "XDS_SERVER_TLS_SAN", ""),
	xdsVar("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "XDS_MAX_RECV_BYTES", ""),
	xdsVar("FORCE_START_WITHOUT_INITIAL_CONFIG", "XDS_FORCE_START", ""),
	{[]string{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "XDS_CLIENT_BACKOFF_MAX_INTERVAL"},
		[]string{"XDS_BACKOFF_MIN", "XDS_BACKOFF_MAX"}, peerXDSBackoff},
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
	// The peer's counting (rlscount.go): every hit charged, past the limit
	// too, unless STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true; fixed windows.
	{[]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"}, []string{"RLS_CHARGE"}, func(p peerLookup) (map[string]string, error) {
		stop, err := p.flag("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT")
		if stop {
			return map[string]string{"RLS_CHARGE": rls.ChargeStopWhenOverLimit.String()}, err
		}
		return map[string]string{"RLS_CHARGE": rls.ChargeAlways.String()}, err
	}},
	{nil, []string{"RLS_DEFAULT_ALGORITHM"}, func(peerLookup) (map[string]string, error) {
		return map[string]string{"RLS_DEFAULT_ALGORITHM": string(ratelimit.FixedWindow)}, nil
	}},
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
	// The peer presents the pair only when both are set; ours refuse a
	// half pair with one line rather than ignore it.
	whenTrue("REDIS_TLS", []string{"REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY"}, []string{"REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY"},
		func(p peerLookup) map[string]string {
			out := map[string]string{}
			for _, name := range []string{"REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY"} {
				if v := p.or(name, ""); v != "" {
					out[name] = v
				}
			}
			return out
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
	if !strings.EqualFold(p.or("CONFIG_TYPE", "FILE"), "FILE") {
		return nil, nil // xDS, or refused by peerPolicySource
	}
	return map[string]string{"CONFIG": filepath.Join(p.or("RUNTIME_ROOT", "/srv/runtime_data/current"),
		p.or("RUNTIME_SUBDIRECTORY", ""), p.or("RUNTIME_APPDIRECTORY", "config"))}, nil
}

// peerPolicySource checks CONFIG_TYPE here rather than in peerPolicyDir,
// which an EXTAUTHZ_CONFIG given skips: a bad value must refuse then too.
func peerPolicySource(p peerLookup) (map[string]string, error) {
	switch t := p.or("CONFIG_TYPE", "FILE"); strings.ToUpper(t) {
	case "FILE":
		return nil, nil
	case "GRPC_XDS_SOTW":
		return map[string]string{"POLICY_SOURCE": "xds"}, nil
	default:
		return nil, fmt.Errorf("CONFIG_TYPE=%q: want FILE or GRPC_XDS_SOTW", t)
	}
}

// xdsVar maps one of the peer's xDS variables when the limits come over
// xDS: its value, else def (the peer's default where it differs from
// ours), else nothing.
func xdsVar(from, to, def string) peerMapping {
	return peerMapping{[]string{from}, []string{to}, func(p peerLookup) (map[string]string, error) {
		if !overXDS(p) {
			return nil, nil
		}
		return setOnly(to, p.or(from, def)), nil
	}}
}

// overXDS: the limits come over xDS.
func overXDS(p peerLookup) bool {
	return strings.EqualFold(p.or("CONFIG_TYPE", "FILE"), "GRPC_XDS_SOTW")
}

// peerNodeMetadata: the peer takes key:value or key=value pairs
// ("key1:val1,key2=val2"); ours, key=value.
func peerNodeMetadata(p peerLookup) (map[string]string, error) {
	v, ok := p("CONFIG_GRPC_XDS_NODE_METADATA")
	if !ok || !overXDS(p) {
		return nil, nil
	}
	var pairs []string
	for _, kv := range splitList(v) {
		sep := strings.IndexAny(kv, "=:")
		if sep <= 0 {
			return nil, fmt.Errorf("CONFIG_GRPC_XDS_NODE_METADATA=%q: want key:value or key=value pairs, comma separated", v)
		}
		pairs = append(pairs, strings.TrimSpace(kv[:sep])+"="+strings.TrimSpace(kv[sep+1:]))
	}
	return setOnly("XDS_NODE_METADATA", strings.Join(pairs, ",")), nil
}

// peerXDSBackoff: the peer retries its first connection every
// CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL and its stream with a
// backoff from XDS_CLIENT_BACKOFF_INITIAL_INTERVAL up to _MAX_INTERVAL
// (60s by default); ours is one backoff for both. Either first pause given
// sets ours, with the peer's longest (a first pause above our 30s default
// would otherwise refuse to start).
func peerXDSBackoff(p peerLookup) (map[string]string, error) {
	if !overXDS(p) {
		return nil, nil
	}
	out := map[string]string{}
	if v := p.or("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", p.or("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "")); v != "" {
		out["XDS_BACKOFF_MIN"], out["XDS_BACKOFF_MAX"] = v, "60s"
	}
	if v, ok := p("XDS_CLIENT_BACKOFF_MAX_INTERVAL"); ok {
		out["XDS_BACKOFF_MAX"] = v
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
