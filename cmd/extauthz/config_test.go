package main

import (
	"net"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/extauthz/extauthz/pkg/ratelimit/allotment"
)

// TestBadEnvironmentStopsWithOneLine: each unusable value stops the binary
// before it starts anything, with exit code 2 and exactly one line naming
// the variable, its value and what it accepts; never a stack trace.
func TestBadEnvironmentStopsWithOneLine(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  string
		want string // the line, after "extauthz: "
	}{
		{"EXTAUTHZ_REDIS_POOL_SIZE=-3", "EXTAUTHZ_REDIS_POOL_SIZE=-3: want 0 (go-redis's default, 10 per CPU) to 10000"},
		{"EXTAUTHZ_REDIS_POOL_SIZE=many", `EXTAUTHZ_REDIS_POOL_SIZE="many": not an integer; want 0 (go-redis's default, 10 per CPU) to 10000`},
		// envconfig reads integers in base 0: 010 would be 8, 0x10 16.
		{"EXTAUTHZ_REDIS_POOL_SIZE=010", `EXTAUTHZ_REDIS_POOL_SIZE="010": not an integer; want 0 (go-redis's default, 10 per CPU) to 10000`},
		{"EXTAUTHZ_REDIS_POOL_SIZE=0x10", `EXTAUTHZ_REDIS_POOL_SIZE="0x10": not an integer; want 0 (go-redis's default, 10 per CPU) to 10000`},
		{"EXTAUTHZ_SHUTDOWN_TIMEOUT=0s", "EXTAUTHZ_SHUTDOWN_TIMEOUT=0s: want a duration above 0, e.g. 10s"},
		{"EXTAUTHZ_REDIS_CALL_TIMEOUT=0", "EXTAUTHZ_REDIS_CALL_TIMEOUT=0s: want a duration above 0, e.g. 50ms"},
		{"EXTAUTHZ_REDIS_READ_TIMEOUT=-1s", "EXTAUTHZ_REDIS_READ_TIMEOUT=-1s: want a duration above 0, e.g. 50ms"},
		{"EXTAUTHZ_REDIS_DIAL_TIMEOUT=soon", `EXTAUTHZ_REDIS_DIAL_TIMEOUT="soon": not a duration (e.g. 250ms, 10s); want a duration above 0, e.g. 200ms`},
		{"EXTAUTHZ_IDEMPOTENCY_STORE_TIMEOUT=0ms", "EXTAUTHZ_IDEMPOTENCY_STORE_TIMEOUT=0s: want a duration above 0, e.g. 100ms"},
		{"EXTAUTHZ_MEMORY_MAX_KEYS=-1", "EXTAUTHZ_MEMORY_MAX_KEYS=-1: want 0 (unbounded) or more"},
		{"EXTAUTHZ_ALLOTMENT_MAX_SLICES=0", "EXTAUTHZ_ALLOTMENT_MAX_SLICES=0: want 1 or more"},
		{"EXTAUTHZ_REDIS_BREAKER_THRESHOLD=0", "EXTAUTHZ_REDIS_BREAKER_THRESHOLD=0: want 1 to 1000 failures in a row"},
		{"EXTAUTHZ_GRPC_STREAM_WORKERS=-1", "EXTAUTHZ_GRPC_STREAM_WORKERS=-1: want 0 (a goroutine per call) to 4096"},
		{"EXTAUTHZ_GRPC_STREAM_WORKERS=5000", "EXTAUTHZ_GRPC_STREAM_WORKERS=5000: want 0 (a goroutine per call) to 4096"},
		{"EXTAUTHZ_REDIS_BREAKER_PAUSE=0s", "EXTAUTHZ_REDIS_BREAKER_PAUSE=0s: want a duration above 0, e.g. 1s"},
		{"EXTAUTHZ_IDEMPOTENCY_WAIT_REPLICAS=-1", "EXTAUTHZ_IDEMPOTENCY_WAIT_REPLICAS=-1: want 0 (no WAIT) to 16"},
		{"EXTAUTHZ_IDEMPOTENCY_WAIT_REPLICAS=1\x00EXTAUTHZ_IDEMPOTENCY_WAIT_TIMEOUT=50ms", "EXTAUTHZ_IDEMPOTENCY_WAIT_TIMEOUT=50ms: want a duration of 1ms or more, below EXTAUTHZ_REDIS_READ_TIMEOUT when WAIT is on, e.g. 20ms"},
		{"EXTAUTHZ_GRPC_ADDR=localhost", `EXTAUTHZ_GRPC_ADDR="localhost": want host:port with a port 0-65535, e.g. :9001`},
		{"EXTAUTHZ_HTTP_ADDR=:99999", `EXTAUTHZ_HTTP_ADDR=":99999": want host:port with a port 0-65535, e.g. :9090`},
		{"EXTAUTHZ_REDIS_URL=http://u:secret@h:1", `EXTAUTHZ_REDIS_URL="http://u:xxxxx@h:1": want empty, or redis://[user:password@]host:port[/db] or rediss://...`},
		{"EXTAUTHZ_REDIS_CLUSTER=yes please", `EXTAUTHZ_REDIS_CLUSTER="yes please": not true or false; want true or false`},
		{"EXTAUTHZ_FAILURE_MODE=maybe", `EXTAUTHZ_FAILURE_MODE="maybe": want open or closed`},
		// Refused even without Redis, where it would fail only later (exit 1).
		{"EXTAUTHZ_KEY_PREFIX=a{b}", `EXTAUTHZ_KEY_PREFIX="a{b}": want text without '{' or '}', e.g. xa`},
		{"EXTAUTHZ_REDIS_URL=redis://127.0.0.1:1\x00EXTAUTHZ_KEY_PREFIX=}", `EXTAUTHZ_KEY_PREFIX="}": want text without '{' or '}', e.g. xa`},
		// 0 is refused, never silently replaced by the default.
		{"EXTAUTHZ_NEAR_LIMIT_RATIO=0", "EXTAUTHZ_NEAR_LIMIT_RATIO=0: want a ratio in (0, 1], e.g. 0.8"},
		{"EXTAUTHZ_NEAR_LIMIT_RATIO=1.01", "EXTAUTHZ_NEAR_LIMIT_RATIO=1.01: want a ratio in (0, 1], e.g. 0.8"},
		{"EXTAUTHZ_LOG_LEVEL=loud", `EXTAUTHZ_LOG_LEVEL="loud": want debug, info, warn or error`},
		{"EXTAUTHZ_OTLP_ENDPOINT=collector:4317", `EXTAUTHZ_OTLP_ENDPOINT="collector:4317": want empty (tracing off), or http://host:port or https://host:port (a path only with http/protobuf)`},
		{"EXTAUTHZ_OTLP_ENDPOINT=http://collector", `EXTAUTHZ_OTLP_ENDPOINT="http://collector": want empty (tracing off), or http://host:port or https://host:port (a path only with http/protobuf)`},
		{"EXTAUTHZ_OTLP_ENDPOINT=https://u:secret@collector:4317", `EXTAUTHZ_OTLP_ENDPOINT="https://u:xxxxx@collector:4317": want empty (tracing off), or http://host:port or https://host:port (a path only with http/protobuf)`},
		{"EXTAUTHZ_OTLP_ENDPOINT=http://collector:4317/v1/traces", `EXTAUTHZ_OTLP_ENDPOINT="http://collector:4317/v1/traces": want empty (tracing off), or http://host:port or https://host:port (a path only with http/protobuf)`},
		{"EXTAUTHZ_OTLP_PROTOCOL=http/json", `EXTAUTHZ_OTLP_PROTOCOL="http/json": want grpc or http/protobuf`},
		{"EXTAUTHZ_TRACE_SAMPLE_RATIO=1.5", "EXTAUTHZ_TRACE_SAMPLE_RATIO=1.5: want a ratio in [0, 1]"},
		{"EXTAUTHZ_TRACE_SAMPLE_RATIO=half", `EXTAUTHZ_TRACE_SAMPLE_RATIO="half": not a number; want a ratio in [0, 1]`},
	} {
		t.Run(c.env, func(t *testing.T) {
			t.Parallel()
			// Real addresses: were the value accepted, the process would
			// serve, and the test would see it run instead of exit.
			env := append([]string{"EXTAUTHZ_GRPC_ADDR=127.0.0.1:0", "EXTAUTHZ_HTTP_ADDR=127.0.0.1:0"}, strings.Split(c.env, "\x00")...)
			code, stdout, stderr := runBinary(t, env)
			if want := "extauthz: " + c.want + "\n"; code != 2 || stderr != want || stdout != "" {
				t.Errorf("exit %d, stderr %q, stdout %q; want exit 2 and stderr %q", code, stderr, stdout, want)
			}
			if strings.Contains(stderr, "secret") {
				t.Errorf("stderr %q shows the URL's password", stderr)
			}
		})
	}
}

// TestListenerErrorNamesTheVariable: an address in use or a host that
// does not resolve stops the process (exit 1: only listening tells) with
// an error naming the variable that chose it.
func TestListenerErrorNamesTheVariable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Closed after the parallel subtests, which run once this function
	// has returned.
	t.Cleanup(func() { ln.Close() })
	busy := ln.Addr().String()
	free := "127.0.0.1:0"
	for _, c := range []struct {
		name string
		env  []string
	}{
		{"HTTP_ADDR", []string{"EXTAUTHZ_GRPC_ADDR=" + free, "EXTAUTHZ_HTTP_ADDR=" + busy}},
		{"GRPC_ADDR", []string{"EXTAUTHZ_GRPC_ADDR=" + busy, "EXTAUTHZ_HTTP_ADDR=" + free}},
		{"GRPC_ADDR", []string{"EXTAUTHZ_GRPC_ADDR=no-such-host.invalid:0", "EXTAUTHZ_HTTP_ADDR=" + free}},
		{"DEBUG_ADDR", []string{"EXTAUTHZ_GRPC_ADDR=" + free, "EXTAUTHZ_HTTP_ADDR=" + free, "EXTAUTHZ_DEBUG_ADDR=" + busy}},
	} {
		t.Run(strings.Join(c.env, " "), func(t *testing.T) {
			t.Parallel()
			code, _, stderr := runBinary(t, c.env)
			if want := `EXTAUTHZ_` + c.name + `=\"`; code != 1 || !strings.Contains(stderr, want) {
				t.Errorf("exit %d, stderr %q; want 1 naming EXTAUTHZ_%s", code, stderr, c.name)
			}
		})
	}
}

// TestAllotmentMaxSlicesDefault: the slices' bound has its own variable,
// whose default is the allotment package's, not the memory store's bound.
func TestAllotmentMaxSlicesDefault(t *testing.T) {
	t.Parallel()
	cfg := defaultConfig(t)
	if cfg.AllotmentMaxSlices != allotment.DefaultMaxSlices {
		t.Errorf("EXTAUTHZ_ALLOTMENT_MAX_SLICES defaults to %d, want allotment.DefaultMaxSlices (%d)", cfg.AllotmentMaxSlices, allotment.DefaultMaxSlices)
	}
	if cfg.AllotmentMaxSlices == cfg.MemoryMaxKeys {
		t.Errorf("the slices' bound equals EXTAUTHZ_MEMORY_MAX_KEYS's default (%d): still fed from it?", cfg.MemoryMaxKeys)
	}
}

// EXTAUTHZ_XDS_HEADERS, the one map, reads envconfig's key:value,key:value;
// a pair without ':' is one line naming the variable.
func TestReadEnvMap(t *testing.T) {
	setExactEnv(t, map[string]string{"EXTAUTHZ_XDS_HEADERS": "x-token:a:b, x-tenant:t1"})
	var cfg Config
	if err := readEnv(&cfg); err != nil {
		t.Fatal(err)
	}
	if want := (headerPairs{"x-token": "a:b", "x-tenant": "t1"}); !reflect.DeepEqual(cfg.XDSHeaders, want) {
		t.Errorf("XDSHeaders = %v, want %v", cfg.XDSHeaders, want)
	}
	err := parseErrors(func(k string) (string, bool) { return "x-token", k == "EXTAUTHZ_XDS_HEADERS" })
	if err == nil || !strings.HasPrefix(err.Error(), `EXTAUTHZ_XDS_HEADERS="x-token": not key:value pairs`) {
		t.Errorf("a pair without ':': %v", err)
	}
}

// TestPolicyPathPrecedence: EXTAUTHZ_CONFIG as given (set to empty, none),
// else the image's directory where it exists and the policy comes from
// files; the image sets no variable for it, so under the peer's names
// RUNTIME_ROOT's directory (fed through EXTAUTHZ_CONFIG) wins over it.
func TestPolicyPathPrecedence(t *testing.T) {
	cases := []struct {
		name   string
		argv0  string
		env    map[string]string
		exists bool
		want   string
	}{
		{"unset, image directory present", "extauthz", nil, true, defaultPolicyDir},
		{"unset, no image directory", "extauthz", nil, false, ""},
		{"set", "extauthz", map[string]string{"EXTAUTHZ_CONFIG": "/mine"}, true, "/mine"},
		{"set to empty", "extauthz", map[string]string{"EXTAUTHZ_CONFIG": ""}, true, ""},
		{"over xds", "extauthz", map[string]string{"EXTAUTHZ_XDS_SERVER_URL": "xds:18000"}, true, ""},
		{"peer's RUNTIME_ROOT", "ratelimit", map[string]string{"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "rl"}, true, "/data/rl/config"},
		{"peer's default directory", "ratelimit", nil, true, "/srv/runtime_data/current/config"},
		{"ours over the peer's", "ratelimit", map[string]string{"RUNTIME_ROOT": "/data", "EXTAUTHZ_CONFIG": "/mine"}, true, "/mine"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			setExactEnv(t, tc.env)
			if _, err := exportPeerEnv(tc.argv0); err != nil {
				t.Fatal(err)
			}
			var cfg Config
			if err := readEnv(&cfg); err != nil {
				t.Fatal(err)
			}
			if got := cfg.policyPath(os.LookupEnv, func(string) bool { return tc.exists }); got != tc.want {
				t.Errorf("policy path %q, want %q", got, tc.want)
			}
		})
	}
}
