package devjwt

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The shipped front proxy keeps everything but its key source: the
// provider reads the local file, issuer, audiences, rules and the RLS
// actions (YAML aliases) are unchanged.
func TestUseLocalJWKSOnTheShippedFrontProxy(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile(filepath.Join("..", "..", "envoy", "front-proxy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := UseLocalJWKS(src, "/etc/envoy/jwks.json")
	if err != nil {
		t.Fatal(err)
	}
	var before, after map[string]any
	if err := yaml.Unmarshal(src, &before); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(out, &after); err != nil {
		t.Fatal(err)
	}
	pb, pa := provider(t, before), provider(t, after)
	if got := pa["local_jwks"]; got == nil || got.(map[string]any)["filename"] != "/etc/envoy/jwks.json" {
		t.Errorf("local_jwks = %v", got)
	}
	delete(pb, "remote_jwks")
	delete(pa, "local_jwks")
	if b, a := dump(t, before), dump(t, after); a != b {
		t.Error("something besides the key source changed")
	}
	if _, err := UseLocalJWKS([]byte("static_resources: {}\n"), "x"); !errors.Is(err, ErrNoProvider) {
		t.Errorf("no provider: err = %v, want ErrNoProvider", err)
	}
}

// provider digs out front-proxy.yaml's provider "idp" (a live reference).
func provider(t *testing.T, doc map[string]any) map[string]any {
	t.Helper()
	res := doc["static_resources"].(map[string]any)
	hcm := res["listeners"].([]any)[0].(map[string]any)["filter_chains"].([]any)[0].(map[string]any)["filters"].([]any)[0].(map[string]any)["typed_config"].(map[string]any)
	for _, f := range hcm["http_filters"].([]any) {
		fm := f.(map[string]any)
		if fm["name"] == "envoy.filters.http.jwt_authn" {
			return fm["typed_config"].(map[string]any)["providers"].(map[string]any)["idp"].(map[string]any)
		}
	}
	t.Fatal("no jwt_authn filter")
	return nil
}

func dump(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
