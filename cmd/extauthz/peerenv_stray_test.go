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

// TestEveryVariableIsPrefixed: readEnv runs envconfig with no prefix of its
// own, so a field tagged without ours would be read under a bare name (and
// one without a tag under its field name): every tag must be a whole
// EXTAUTHZ_ name.
func TestEveryVariableIsPrefixed(t *testing.T) {
	t.Parallel()
	typ := reflect.TypeFor[Config]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		if name := varName(f); !strings.HasPrefix(name, envPrefix) || len(name) == len(envPrefix) || name != strings.ToUpper(name) {
			t.Errorf("Config.%s is read from %q; want an upper-case %s* tag", f.Name, name, envPrefix)
		}
	}
}
