package e2e

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The way docker-compose.yaml and docs/envoy.md tell users to try the front
// proxy: `go run ./cmd/devjwt -sub acme` prints a token and writes a copy of
// envoy/front-proxy.yaml whose provider reads devjwt's key set. That copy,
// run as it was written (only addresses substituted), admits the token as
// its sub, and still refuses a request without one.
func TestDevJWTTokenThroughItsConfig(t *testing.T) {
	t.Parallel()
	needEnvoy(t)
	dir := t.TempDir()
	tenant := uniq("devjwt")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "run", "./cmd/devjwt", "-dir", dir, "-sub", tenant,
		"-jwks-path", filepath.Join(dir, "jwks.json"))
	cmd.Dir = deps.root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go run ./cmd/devjwt: %v", err)
	}
	token := strings.TrimSpace(string(out))
	copied, err := os.ReadFile(filepath.Join(dir, "front-proxy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, stackOpts{replicas: 1, keepJWKS: true, edit: func([]byte) []byte { return copied }})
	r := s.do(t, authGet("/things", "Bearer "+token))
	if r.status != http.StatusOK {
		t.Fatalf("devjwt's token: got %s, want 200", r)
	}
	if n := s.up.Executions(tenant, ""); n != 1 {
		t.Errorf("upstream saw the token's sub %d times, want 1", n)
	}
	if r := s.do(t, req{path: "/things"}); r.status != http.StatusUnauthorized {
		t.Errorf("no token: got %s, want 401", r)
	}
	// testIDP's tokens are not devjwt's: the copy trusts only its own key.
	if r := s.do(t, authGet("/things", bearer(tenant, nil))); r.status != http.StatusUnauthorized {
		t.Errorf("a token of another key: got %s, want 401", r)
	}
}
