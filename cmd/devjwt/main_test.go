package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The first call writes the key and its JWKS; later calls reuse the key
// (the JWKS is unchanged) and sign the claims asked for.
func TestRunKeepsOneKeyAndSignsTheClaims(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	now := time.Unix(1_800_000_000, 0)
	var out bytes.Buffer
	front := filepath.Join("..", "..", "envoy", "front-proxy.yaml")
	if err := run([]string{"-dir", dir, "-sub", "acme", "-plan", "pro", "-envoy", front}, &out, now); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "front-proxy.yaml")); err != nil || !strings.Contains(string(b), "local_jwks: {filename: /etc/envoy/jwks.json}") {
		t.Errorf("front-proxy.yaml copy: %v\n%s", err, b)
	}
	jwks, err := os.ReadFile(filepath.Join(dir, "jwks.json"))
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run([]string{"-dir", dir, "-sub", "other", "-ttl", "1m", "-envoy", ""}, &out, now); err != nil {
		t.Fatal(err)
	}
	again, _ := os.ReadFile(filepath.Join(dir, "jwks.json"))
	if !bytes.Equal(jwks, again) {
		t.Error("the second call changed jwks.json")
	}
	parts := strings.Split(strings.TrimSpace(out.String()), ".")
	if len(parts) != 3 {
		t.Fatalf("token %q", out.String())
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims map[string]any
	if err := json.Unmarshal(raw, &claims); err != nil {
		t.Fatal(err)
	}
	if claims["sub"] != "other" || claims["exp"] != float64(now.Unix()+60) || claims["iss"] != "https://idp.example.com/" ||
		claims["aud"] != "api.example.com" {
		t.Errorf("claims = %v", claims)
	}
	if _, ok := claims["plan"]; ok {
		t.Errorf("plan claim without -plan: %v", claims)
	}
	if err := run([]string{"-dir", dir}, &out, now); err == nil {
		t.Error("no -sub: want an error")
	}
}
