package main

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

// loadAs runs loadConfigFrom as argv0 with exactly env set.
func loadAs(t *testing.T, argv0 string, env map[string]string) (Config, []string, error) {
	t.Helper()
	setExactEnv(t, env)
	return loadConfigFrom(argv0)
}

// pemFiles writes three readable files standing for a certificate, a key
// and a CA (Validate checks that they are readable; listen_test.go covers
// their contents).
func pemFiles(t *testing.T) (cert, key, ca string) {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"tls.crt", "tls.key", "ca.crt"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")
}

func TestPeerSettingsTranslate(t *testing.T) {
	cert, key, ca := pemFiles(t)
	peerListen := func(c *Config) {
		c.GRPCAddr, c.HTTPAddr, c.Config = "0.0.0.0:8081", "0.0.0.0:8080", "/srv/runtime_data/current/config"
	}
	cases := []struct {
		name  string
		argv0 string
		env   map[string]string
		want  func(*Config)
	}{
		{"not the peer: its names are ignored", "/usr/local/bin/extauthz",
			map[string]string{"REDIS_URL": "redis.ns:6379", "PORT": "1234", "GRPC_PORT": "4321", "LOG_LEVEL": "WARN", "SHADOW_MODE": "true"},
			func(*Config) {}},
		{"as ratelimit: the peer's ports and policy directory", "/bin/ratelimit", nil, peerListen},
		{"a marker variable without the name", "extauthz",
			map[string]string{"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "PORT": "9", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "7"},
			func(c *Config) {
				c.GRPCAddr, c.HTTPAddr, c.Config = "127.0.0.1:7", "0.0.0.0:9", "/data/ratelimit/config"
			}},
		{"RUNTIME_APPDIRECTORY", "ratelimit", map[string]string{"RUNTIME_ROOT": "/data", "RUNTIME_APPDIRECTORY": "limits"},
			func(c *Config) { peerListen(c); c.Config = "/data/limits" }},
		{"Redis over TLS with a password", "ratelimit",
			map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis.ns:6379", "REDIS_TLS": "true", "REDIS_AUTH": "s3cret",
				"REDIS_TLS_CACERT": ca, "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true"},
			func(c *Config) {
				peerListen(c)
				c.RedisURL, c.RedisTLSCAFile, c.RedisTLSInsecureSkipVerify = "rediss://:s3cret@redis.ns:6379", ca, true
			}},
		{"Redis client certificate (Envoy Gateway's certificateRef)", "ratelimit",
			map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis.ns:6379", "REDIS_TLS": "true",
				"REDIS_TLS_CLIENT_CERT": cert, "REDIS_TLS_CLIENT_KEY": key},
			func(c *Config) {
				peerListen(c)
				c.RedisURL, c.RedisTLSClientCert, c.RedisTLSClientKey = "rediss://redis.ns:6379", cert, key
			}},
		{"Redis client certificate without REDIS_TLS is the peer's no-op", "ratelimit",
			map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis.ns:6379", "REDIS_TLS_CLIENT_CERT": cert, "REDIS_TLS_CLIENT_KEY": key},
			func(c *Config) { peerListen(c); c.RedisURL = "redis://redis.ns:6379" }},
		{"Redis CA without REDIS_TLS is the peer's no-op", "ratelimit",
			map[string]string{"REDIS_SOCKET_TYPE": "TCP", "REDIS_URL": "redis.ns:6379", "REDIS_TLS_CACERT": ca},
			func(c *Config) { peerListen(c); c.RedisURL = "redis://redis.ns:6379" }},
		{"Redis Cluster with user and password", "ratelimit",
			map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "cluster", "REDIS_URL": "a:7000, b:7001,c:7002", "REDIS_AUTH": "u:p"},
			func(c *Config) {
				peerListen(c)
				c.RedisURL, c.RedisCluster = "redis://u:p@a:7000?addr=b%3A7001&addr=c%3A7002", true
			}},
		{"Redis Sentinel", "ratelimit",
			map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "SENTINEL", "REDIS_URL": "mymaster,s1:26379,s2:26379",
				"REDIS_AUTH": "pw", "REDIS_SENTINEL_AUTH": "spw"},
			func(c *Config) {
				peerListen(c)
				c.RedisURL, c.RedisSentinelMaster, c.RedisSentinelAddrs, c.RedisSentinelPassword = "redis://:pw@/0", "mymaster", "s1:26379,s2:26379", "spw"
			}},
		{"gRPC mutual TLS as Envoy Gateway names it", "ratelimit",
			map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": cert, "GRPC_SERVER_TLS_KEY": key,
				"GRPC_SERVER_TLS_CA_CERT": ca, "GRPC_CLIENT_TLS_SAN": "envoy.ns"},
			func(c *Config) {
				peerListen(c)
				c.GRPCTLSCert, c.GRPCTLSKey, c.GRPCTLSClientCA, c.GRPCTLSClientSANs = cert, key, ca, "envoy.ns"
			}},
		{"gRPC mutual TLS as the peer names it", "ratelimit",
			map[string]string{"GRPC_SERVER_USE_TLS": "1", "GRPC_SERVER_TLS_CERT": cert, "GRPC_SERVER_TLS_KEY": key, "GRPC_CLIENT_TLS_CACERT": ca},
			func(c *Config) { peerListen(c); c.GRPCTLSCert, c.GRPCTLSKey, c.GRPCTLSClientCA = cert, key, ca }},
		{"TLS files without GRPC_SERVER_USE_TLS are the peer's no-op", "ratelimit",
			map[string]string{"GRPC_SERVER_TLS_CERT": cert, "GRPC_SERVER_TLS_KEY": key},
			peerListen},
		{"GRPC_UDS", "ratelimit", map[string]string{"GRPC_UDS": filepath.Join(t.TempDir(), "rl.sock")},
			func(c *Config) { peerListen(c); c.GRPCUDS = filepath.Join(filepath.Dir(c.GRPCUDS), "rl.sock") }},
		{"log levels, upper case", "ratelimit", map[string]string{"LOG_LEVEL": "WARN"},
			func(c *Config) { peerListen(c); c.LogLevel = "warn" }},
		{"logrus's trace", "ratelimit", map[string]string{"LOG_LEVEL": "trace"},
			func(c *Config) { peerListen(c); c.LogLevel = "debug" }},
		{"Prometheus on its own address", "ratelimit", map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": ":19001"},
			func(c *Config) { peerListen(c); c.MetricsAddr = ":19001" }},
		{"PROMETHEUS_ADDR without USE_PROMETHEUS", "ratelimit", map[string]string{"PROMETHEUS_ADDR": ":19001"}, peerListen},
		{"decision settings", "ratelimit",
			map[string]string{"SHADOW_MODE": "true", "QUOTA_MODE": "true", "RESPONSE_DYNAMIC_METADATA": "true", "MERGE_DOMAIN_CONFIG": "true",
				"NEAR_LIMIT_RATIO": "0.9", "LOCAL_CACHE_SIZE_IN_BYTES": "0", "CACHE_KEY_PREFIX": "rl_", "REDIS_POOL_SIZE": "20", "REDIS_TIMEOUT": "1s"},
			func(c *Config) {
				peerListen(c)
				c.ShadowMode, c.QuotaMode, c.ResponseDynamicMetadata, c.MergeDomains = true, true, true, true
				c.NearLimitRatio, c.LocalCache, c.KeyPrefix, c.RedisPoolSize, c.RedisDialTimeout = 0.9, false, "rl_", 20, time.Second
			}},
		{"tracing as Envoy Gateway sets it", "ratelimit",
			map[string]string{"TRACING_ENABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "otel.ns:4318", "TRACING_SAMPLING_RATE": "0.5"},
			func(c *Config) {
				peerListen(c)
				c.OTLPEndpoint, c.OTLPProtocol, c.TraceSampleRatio = "http://otel.ns:4318", "http/protobuf", 0.5
			}},
		{"tracing over gRPC to the SDK's default", "ratelimit", map[string]string{"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "grpc"},
			func(c *Config) { peerListen(c); c.OTLPEndpoint, c.OTLPProtocol = "http://localhost:4317", "grpc" }},
		{"OTEL_EXPORTER_OTLP_ENDPOINT without TRACING_ENABLED", "ratelimit", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel:4318"}, peerListen},
		{"limits over xDS as Envoy Gateway sets them", "ratelimit",
			map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "envoy-gateway:18001",
				"CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit", "CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": cert,
				"CONFIG_GRPC_XDS_CLIENT_TLS_KEY": key, "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": ca, "FORCE_START_WITHOUT_INITIAL_CONFIG": "true"},
			func(c *Config) {
				c.GRPCAddr, c.HTTPAddr, c.PolicySource, c.XDSServerURL, c.XDSNodeID = "0.0.0.0:8081", "0.0.0.0:8080", "xds", "envoy-gateway:18001", "envoy-ratelimit"
				c.XDSServerUseTLS, c.XDSClientTLSCert, c.XDSClientTLSKey, c.XDSServerTLSCA, c.XDSForceStart = true, cert, key, ca, true
			}},
		{"limits over xDS with the peer's defaults", "ratelimit", map[string]string{"CONFIG_TYPE": "grpc_xds_sotw"},
			func(c *Config) {
				c.GRPCAddr, c.HTTPAddr, c.PolicySource, c.XDSServerURL, c.XDSNodeID = "0.0.0.0:8081", "0.0.0.0:8080", "xds", "localhost:18000", "default"
			}},
		{"the peer's other xDS settings", "ratelimit",
			map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_NODE_METADATA": "zone:eu-1, team=edge", "CONFIG_GRPC_XDS_SERVER_USE_TLS": "true",
				"CONFIG_GRPC_XDS_SERVER_TLS_SAN": "envoy-gateway.ns", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "x-token:abc,x-tenant:t1",
				"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": "8388608", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "2s", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "20s"},
			func(c *Config) {
				c.GRPCAddr, c.HTTPAddr, c.PolicySource, c.XDSServerURL, c.XDSNodeID = "0.0.0.0:8081", "0.0.0.0:8080", "xds", "localhost:18000", "default"
				c.XDSNodeMetadata, c.XDSServerUseTLS, c.XDSServerTLSSAN = "zone=eu-1,team=edge", true, "envoy-gateway.ns"
				c.XDSHeaders, c.XDSMaxRecvBytes = map[string]string{"x-token": "abc", "x-tenant": "t1"}, 8388608
				c.XDSBackoffMin, c.XDSBackoffMax = 2*time.Second, 20*time.Second
			}},
		{"the connect retry interval, with the peer's longest backoff", "ratelimit",
			map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": "45s"},
			func(c *Config) {
				c.GRPCAddr, c.HTTPAddr, c.PolicySource, c.XDSServerURL, c.XDSNodeID = "0.0.0.0:8081", "0.0.0.0:8080", "xds", "localhost:18000", "default"
				c.XDSBackoffMin, c.XDSBackoffMax = 45*time.Second, 60*time.Second
			}},
		{"xDS variables without CONFIG_TYPE=GRPC_XDS_SOTW are the peer's no-op", "ratelimit",
			map[string]string{"CONFIG_GRPC_XDS_SERVER_URL": "envoy-gateway:18001", "FORCE_START_WITHOUT_INITIAL_CONFIG": "true"},
			peerListen},
		{"our names win", "ratelimit",
			map[string]string{"GRPC_PORT": "5", "EXTAUTHZ_GRPC_ADDR": "127.0.0.1:1", "LOG_LEVEL": "error", "EXTAUTHZ_LOG_LEVEL": "debug",
				"REDIS_URL": "no scheme", "EXTAUTHZ_REDIS_URL": "", "EXTAUTHZ_REDIS_CLUSTER": "false",
				"EXTAUTHZ_REDIS_SENTINEL_ADDRS": "", "EXTAUTHZ_REDIS_SENTINEL_MASTER": ""},
			func(c *Config) { peerListen(c); c.GRPCAddr, c.LogLevel = "127.0.0.1:1", "debug" }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := defaultConfig(t)
			got, warnings, err := loadAs(t, c.argv0, c.env)
			if err != nil {
				t.Fatalf("loadConfigFrom: %v", err)
			}
			if peerMode(c.argv0, func(k string) (string, bool) { v, ok := c.env[k]; return v, ok }) { // the peer's counting (rlscount.go)
				want.RLSCharge, want.RLSDefaultAlgorithm = "always", "fixed_window"
			}
			c.want(&want)
			if c.name == "GRPC_UDS" {
				want.GRPCUDS = c.env["GRPC_UDS"]
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("config:\n got %+v\nwant %+v", got, want)
			}
			if len(warnings) != 0 {
				t.Errorf("warnings %q, want none", warnings)
			}
		})
	}
}

// A variable with no meaning here starts with one warning line naming it;
// its harmless values (the ones meaning what extauthz does anyway) none.
func TestPeerSettingsWarn(t *testing.T) {
	env := map[string]string{
		"USE_STATSD": "true", "STATSD_HOST": "statsd", "MEMCACHE_HOST_PORT": "m:11211", "PROMETHEUS_MAPPER_YAML": "/etc/conf.yaml",
		"GRPC_MAX_CONNECTION_AGE": "1h", "XDS_CLIENT_BACKOFF_JITTER": "false", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "0.2",
		// harmless: no line
		"USE_DOG_STATSD": "false", "RUNTIME_WATCH_ROOT": "false", "RUNTIME_IGNOREDOTFILES": "true", "PROMETHEUS_PATH": "/metrics",
		"BACKEND_TYPE": "redis", "REDIS_PERSECOND": "false",
	}
	_, warnings, err := loadAs(t, "ratelimit", env)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"USE_STATSD", "STATSD_HOST", "MEMCACHE_HOST_PORT", "PROMETHEUS_MAPPER_YAML", "GRPC_MAX_CONNECTION_AGE",
		"XDS_CLIENT_BACKOFF_JITTER", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR"}
	if len(warnings) != len(want) {
		t.Fatalf("warnings %q, want one for each of %v", warnings, want)
	}
	for _, name := range want {
		if !strings.Contains(strings.Join(warnings, "\n"), name+" is ignored: ") {
			t.Errorf("no warning names %s: %q", name, warnings)
		}
	}
}

// A setting whose absence would change decisions refuses to start, with one
// line naming it.
func TestPeerSettingsRefuse(t *testing.T) {
	cases := map[string]struct {
		env  map[string]string
		line string
	}{
		"memcache":       {map[string]string{"BACKEND_TYPE": "memcache"}, `BACKEND_TYPE="memcache": refused: `},
		"a second Redis": {map[string]string{"REDIS_PERSECOND": "true"}, `REDIS_PERSECOND="true": refused: `},
		"half a Redis client cert": {map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379", "REDIS_TLS": "true", "REDIS_TLS_CLIENT_CERT": "/redis-certs/tls.crt"},
			`EXTAUTHZ_REDIS_TLS_CLIENT_CERT="/redis-certs/tls.crt": want empty, or a readable PEM file, with EXTAUTHZ_REDIS_TLS_CLIENT_KEY, when EXTAUTHZ_REDIS_URL is rediss:// (from envoyproxy/ratelimit's REDIS_TLS, REDIS_TLS_CLIENT_CERT, REDIS_TLS_CLIENT_KEY)`},
		"node metadata":       {map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_NODE_METADATA": "a:1,lonely"}, `CONFIG_GRPC_XDS_NODE_METADATA="a:1,lonely": want key:value or key=value pairs`},
		"xDS message size":    {map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": "1024"}, `EXTAUTHZ_XDS_MAX_RECV_BYTES=1024: want 0 (gRPC's 4 MiB) or 65536 to 1073741824 (from envoyproxy/ratelimit's XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES)`},
		"unknown config type": {map[string]string{"CONFIG_TYPE": "CONSUL"}, `CONFIG_TYPE="CONSUL": want FILE or GRPC_XDS_SOTW`},
		// An EXTAUTHZ_CONFIG given skips the directory mapping; CONFIG_TYPE is still checked.
		"unknown config type in the image": {map[string]string{"CONFIG_TYPE": "CONSUL", "EXTAUTHZ_CONFIG": "/etc/extauthz/policy"}, `CONFIG_TYPE="CONSUL": want FILE or GRPC_XDS_SOTW`},
		"Redis socket by default":          {map[string]string{"REDIS_URL": "redis:6379"}, `REDIS_SOCKET_TYPE="unix" (unix is the peer's default)`},
		"unknown Redis type":               {map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379", "REDIS_TYPE": "ring"}, `REDIS_TYPE="ring": want SINGLE, CLUSTER or SENTINEL`},
		"two hosts, single":                {map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "a:1,b:2"}, `REDIS_URL="a:1,b:2": want one host:port`},
		"sentinel user":                    {map[string]string{"REDIS_SENTINEL_AUTH": "u:p"}, "REDIS_SENTINEL_AUTH=(redacted): a sentinel user"},
		"bad port":                         {map[string]string{"GRPC_PORT": "grpc"}, `GRPC_PORT="grpc": want a port 0-65535`},
		"bad flag":                         {map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:1", "REDIS_TLS": "yes"}, `REDIS_TLS="yes": want true or false`},
		"bad level":                        {map[string]string{"LOG_LEVEL": "loud"}, `LOG_LEVEL="loud": want trace, debug`},
		"bad cache size":                   {map[string]string{"LOCAL_CACHE_SIZE_IN_BYTES": "-1"}, `LOCAL_CACHE_SIZE_IN_BYTES="-1": want 0`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, _, err := loadAs(t, "ratelimit", c.env)
			if err == nil {
				t.Fatal("started, want a refusal")
			}
			if lines := strings.Split(err.Error(), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], c.line) {
				t.Errorf("refusal %q, want one line starting %q", err, c.line)
			}
		})
	}
}

// Our own checks name the peer's variables a bad value came from.
func TestPeerSettingsNameTheirSource(t *testing.T) {
	_, _, err := loadAs(t, "ratelimit", map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/nonexistent/tls.crt",
		"GRPC_SERVER_TLS_KEY": "/nonexistent/tls.key", "NEAR_LIMIT_RATIO": "2"})
	if err == nil {
		t.Fatal("started with missing certificate files")
	}
	msg := err.Error()
	if !strings.Contains(msg, `EXTAUTHZ_GRPC_TLS_CERT="/nonexistent/tls.crt": want empty, or a readable PEM file, with EXTAUTHZ_GRPC_TLS_KEY (from envoyproxy/ratelimit's GRPC_SERVER_USE_TLS, `) ||
		!strings.Contains(msg, `EXTAUTHZ_NEAR_LIMIT_RATIO=2: want a ratio in (0, 1], e.g. 0.8 (from envoyproxy/ratelimit's NEAR_LIMIT_RATIO)`) {
		t.Errorf("error %q does not name the peer's variables", msg)
	}
}

// TestPeerTableMatchesDocs keeps docs/reference.md's "envoyproxy/ratelimit's
// settings" table in step with peerVars and peerMappings: the same
// variables, classes and EXTAUTHZ_* targets.
func TestPeerTableMatchesDocs(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/reference.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## envoyproxy/ratelimit's settings\n")
	if !ok {
		t.Fatal(`docs/reference.md has no "## envoyproxy/ratelimit's settings" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	row := regexp.MustCompile("(?m)^\\| `([A-Z0-9_]+)` \\| ([^|]*) \\| ([^|]*) \\| .+ \\|$")
	documented := map[string][2]string{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		if _, dup := documented[m[1]]; dup {
			t.Errorf("%s has two rows", m[1])
		}
		documented[m[1]] = [2]string{strings.TrimSpace(m[2]), strings.ReplaceAll(strings.TrimSpace(m[3]), "`", "")}
	}
	for _, v := range peerVars {
		d, ok := documented[v.name]
		if !ok {
			t.Errorf("the docs' table lacks %s", v.name)
			continue
		}
		delete(documented, v.name)
		if want := [2]string{string(v.class), strings.Join(peerTargets(v.name), ", ")}; d != want {
			t.Errorf("%s: the docs say %q, the code %q", v.name, d, want)
		}
		if (v.class == peerWarned || v.class == peerRefused) != (v.why != "") {
			t.Errorf("%s: a warned or refused row needs its reason, only they", v.name)
		}
	}
	for name := range documented {
		t.Errorf("the docs' table has %s, which peerVars lacks", name)
	}
}
