package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// deps are the binaries the tests run, found or built once per package run.
var deps struct {
	// root is the repository root (the module directory).
	root string
	// extauthz is the binary built from ./cmd/extauthz; "" with extauthzErr set.
	extauthz    string
	extauthzErr error
	// envoy is the Envoy binary ("docker" under E2E_ENVOY=docker); "" with
	// envoyErr set.
	envoy    string
	envoyErr error
}

// dockerEnvoy: E2E_ENVOY=docker runs each Envoy with `docker run` of the
// pinned image (envoyDockerArgs), as docs/envoy.md tells users to, instead
// of a local envoy process.
func dockerEnvoy() bool { return os.Getenv("E2E_ENVOY") == "docker" }

// errNotLanded marks a missing cmd/extauthz (not a build failure).
var errNotLanded = errors.New("cmd/extauthz has no main package yet")

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	deps.root = root
	dir, err := os.MkdirTemp("", "extauthz-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := newTestIDP(dir); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	if dockerEnvoy() {
		deps.envoy, deps.envoyErr = findEnvoyImage()
	} else {
		deps.envoy, deps.envoyErr = findEnvoy()
	}
	deps.extauthz, deps.extauthzErr = buildExtauthz(root, dir)
	if ci() {
		// In CI a missing dependency is a failure, never a silent skip.
		_, redisErr := exec.LookPath(envOr("REDIS_SERVER_BIN", "redis-server"))
		for _, err := range []error{deps.envoyErr, redisErr, deps.extauthzErr} {
			if err != nil {
				fmt.Fprintln(os.Stderr, "e2e: CI=true and a dependency is missing:", err)
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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s --version: %w: %s", bin, err, out)
	}
	return bin, nil
}

// findEnvoyImage checks that a Docker engine answers and holds the pinned
// Envoy image (scripts/test-deps.sh pulls it, or builds a stand-in).
func findEnvoyImage() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "image", "inspect", envoyImage).CombinedOutput(); err != nil {
		return "", fmt.Errorf("E2E_ENVOY=docker: docker image inspect %s: %w: %s", envoyImage, err, out)
	}
	return "docker", nil
}

// buildExtauthz builds ./cmd/extauthz once into dir, unless EXTAUTHZ_BIN
// names a binary to test instead (a release, or one built with other flags).
func buildExtauthz(root, dir string) (string, error) {
	if bin := os.Getenv("EXTAUTHZ_BIN"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("EXTAUTHZ_BIN: %w", err)
		}
		return bin, nil
	}
	if _, err := os.Stat(filepath.Join(root, "cmd", "extauthz", "main.go")); err != nil {
		return "", errNotLanded
	}
	out := filepath.Join(dir, "extauthz")
	// Generous: on a fresh machine with an empty build cache, sharing its
	// CPUs, the build alone can take minutes. No test's clock runs yet.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/extauthz")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/extauthz: %w\n%s", err, b)
	}
	return out, nil
}

// need skips the test (or fails it under CI=true) when err is set.
func need(t testing.TB, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if ci() || (what == "extauthz" && !errors.Is(err, errNotLanded)) {
		t.Fatalf("%s: %v", what, err)
	}
	t.Skipf("%s unavailable: %v", what, err)
}

func needEnvoy(t testing.TB)    { t.Helper(); need(t, "envoy", deps.envoyErr) }
func needExtauthz(t testing.TB) { t.Helper(); need(t, "extauthz", deps.extauthzErr) }
