// Package gateway runs Envoy Gateway's own controller (envoy-gateway, built
// from the Go module proxy at EnvoyGatewayVersion) in its standalone mode
// in front of extauthz: its file provider reads Gateway API YAML from a
// directory, its Host infrastructure starts Envoy as a process, its
// translator produces the Envoy config and the RateLimitConfig, and its
// rate-limit xDS server serves that RateLimitConfig to extauthz started as
// its rate limit deployment starts envoyproxy/ratelimit.
//
// Run it with scripts/test-deps.sh (which builds envoy-gateway into
// .cache/ once):
//
//	scripts/test-deps.sh go test -count=1 ./test/gateway/
//
// or point ENVOY_GATEWAY_BIN at an envoy-gateway binary of that version.
// Without one the test skips, and fails under CI=true.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// EnvoyGatewayVersion is the release the test runs; scripts/test-deps.sh
// pins the same (ENVOY_GATEWAY_VERSION).
const EnvoyGatewayVersion = "v1.9.1"

// deps are the binaries the test runs, each found (or built) once.
var deps struct {
	extauthz, envoy, envoyGateway          string
	extauthzErr, envoyErr, envoyGatewayErr error
}

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "extauthz-gateway-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	deps.envoy, deps.envoyErr = findEnvoy()
	deps.envoyGateway, deps.envoyGatewayErr = findEnvoyGateway(root)
	deps.extauthz, deps.extauthzErr = buildExtauthz(root, dir)
	if ci() {
		_, redisErr := exec.LookPath(envOr("REDIS_SERVER_BIN", "redis-server"))
		for _, err := range []error{deps.envoyErr, deps.envoyGatewayErr, deps.extauthzErr, redisErr} {
			if err != nil {
				fmt.Fprintln(os.Stderr, "gateway: CI=true and a dependency is missing:", err)
				return 1
			}
		}
	}
	return m.Run()
}

func ci() bool { return os.Getenv("CI") == "true" }

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// need skips the test when err is set, and fails it under CI=true.
func need(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if ci() {
		t.Fatalf("%s: %v", what, err)
	}
	t.Skipf("%s unavailable: %v", what, err)
}

// findEnvoy returns ENVOY_BIN, else envoy on PATH, checked to run.
func findEnvoy() (string, error) {
	bin := os.Getenv("ENVOY_BIN")
	if bin == "" {
		p, err := exec.LookPath("envoy")
		if err != nil {
			return "", fmt.Errorf("envoy not found (set ENVOY_BIN or put envoy on PATH): %w", err)
		}
		bin = p
	}
	if _, err := envoyVersion(bin); err != nil {
		return "", err
	}
	return bin, nil
}

var envoyVersionRE = regexp.MustCompile(`/(\d+\.\d+\.\d+)/`)

// envoyVersion reads the x.y.z of `envoy --version`.
func envoyVersion(bin string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w: %s", bin, err, out)
	}
	m := envoyVersionRE.FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("%s --version: no x.y.z in %q", bin, out)
	}
	return string(m[1]), nil
}

// findEnvoyGateway returns ENVOY_GATEWAY_BIN, else the copy
// scripts/test-deps.sh builds into .cache/, checked (from its Go build
// information) to be github.com/envoyproxy/gateway at EnvoyGatewayVersion.
func findEnvoyGateway(root string) (string, error) {
	bin := os.Getenv("ENVOY_GATEWAY_BIN")
	if bin == "" {
		bin = filepath.Join(root, ".cache", "envoy-gateway-"+EnvoyGatewayVersion, "envoy-gateway")
	}
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("envoy-gateway %s: %w (scripts/test-deps.sh builds it, or set ENVOY_GATEWAY_BIN)", EnvoyGatewayVersion, err)
	}
	out, err := exec.Command("go", "version", "-m", bin).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go version -m %s: %w: %s", bin, err, out)
	}
	want := regexp.MustCompile(`(?m)^\s+mod\s+github\.com/envoyproxy/gateway\s+` + regexp.QuoteMeta(EnvoyGatewayVersion) + `\s`)
	if !want.Match(out) {
		return "", fmt.Errorf("%s is not github.com/envoyproxy/gateway %s:\n%s", bin, EnvoyGatewayVersion, out)
	}
	return bin, nil
}

// buildExtauthz builds ./cmd/extauthz once into dir, unless EXTAUTHZ_BIN
// names a binary to test instead.
func buildExtauthz(root, dir string) (string, error) {
	if bin := os.Getenv("EXTAUTHZ_BIN"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("EXTAUTHZ_BIN: %w", err)
		}
		return bin, nil
	}
	out := filepath.Join(dir, "extauthz")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/extauthz")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", errors.Join(fmt.Errorf("go build ./cmd/extauthz: %w", err), errors.New(string(b)))
	}
	return out, nil
}
