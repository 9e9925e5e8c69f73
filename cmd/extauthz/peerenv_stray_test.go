package main

import (
	"reflect"
	"strings"
	"testing"
)

// Unprefixed names must never configure extauthz outside the peer's
// settings: Kubernetes injects <SERVICE>_PORT-style variables into every
// pod, and a REDIS_URL meant for another program must not be read as ours.
func TestStrayVariablesDoNotConfigure(t *testing.T) {
	for _, kv := range [][2]string{
		{"REDIS_URL", "redis.example:6379"}, {"PORT", "1234"}, {"GRPC_PORT", "4321"},
		{"GRPC_ADDR", ":1"}, {"HTTP_ADDR", ":2"}, {"LOG_LEVEL", "loud"}, {"CONFIG", "/nowhere"},
		{"KEY_PREFIX", "{x}"}, {"FAILURE_MODE", "sometimes"}, {"SHADOW_MODE", "true"},
	} {
		t.Setenv(kv[0], kv[1])
	}
	cfg, _, err := loadConfig()
	if err != nil {
		t.Fatalf("loadConfig() with only stray variables set: %v", err)
	}
	if want := defaultConfig(t); !reflect.DeepEqual(cfg, want) {
		t.Errorf("loadConfig() = %+v\nwant the defaults %+v", cfg, want)
	}
}

// TestReadEnvPairs: a map field (EXTAUTHZ_XDS_HEADERS) reads key:value
// pairs, the first ':' splitting each; a pair without one is refused,
// naming the variable; unset is no pairs.
func TestReadEnvPairs(t *testing.T) {
	t.Parallel()
	env := func(kv map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := kv[k]; return v, ok }
	}
	var cfg Config
	if err := readEnv(env(map[string]string{"EXTAUTHZ_XDS_HEADERS": "x-team: edge, authorization:Bearer a:b"}), &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.XDSHeaders) != 2 || cfg.XDSHeaders["x-team"] != "edge" || cfg.XDSHeaders["authorization"] != "Bearer a:b" {
		t.Errorf("XDSHeaders = %v", cfg.XDSHeaders)
	}
	if err := readEnv(env(nil), &cfg); err != nil || len(cfg.XDSHeaders) != 0 {
		t.Errorf("unset: %v, %v; want no pairs", cfg.XDSHeaders, err)
	}
	if err := readEnv(env(map[string]string{"EXTAUTHZ_XDS_HEADERS": "novalue"}), &cfg); err == nil || !strings.Contains(err.Error(), "EXTAUTHZ_XDS_HEADERS") {
		t.Errorf("a pair without ':': %v, want an error naming EXTAUTHZ_XDS_HEADERS", err)
	}
}
