package container

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// image is the image built from ./Dockerfile once per test run.
var image struct {
	// root is the repository root.
	root string
	// name is the built image's tag; "" with err set.
	name string
	err  error
}

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		fmt.Fprintln(os.Stderr, "container:", err)
		return 1
	}
	image.root = root
	image.name, image.err = buildImage(root)
	if image.name != "" {
		defer func() { _, _ = docker(context.Background(), "image", "rm", "-f", image.name) }()
	}
	if image.err != nil && ci() {
		// In CI an engine that is missing or a build that fails is a
		// failure, never a silent skip.
		fmt.Fprintln(os.Stderr, "container: CI=true and the image is unavailable:", image.err)
		return 1
	}
	return m.Run()
}

func ci() bool { return os.Getenv("CI") == "true" }

// errNoEngine marks a machine without a Docker engine (skipped outside CI).
var errNoEngine = errors.New("no Docker engine answers `docker info` (scripts/test-deps.sh starts one)")

// buildImage builds the Dockerfile as shipped from a clean copy of the
// repository (its tracked and unignored files), the way `docker build .`
// does in a fresh clone.
func buildImage(root string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := docker(ctx, "info"); err != nil {
		return "", fmt.Errorf("%w: %v", errNoEngine, err)
	}
	dir, err := os.MkdirTemp("", "extauthz-container-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	if err := copyRepo(root, dir); err != nil {
		return "", err
	}
	name := fmt.Sprintf("extauthz-container-test:%d", os.Getpid())
	// Generous: a cold build downloads the modules and compiles everything
	// on a machine whose CPUs are shared.
	bctx, bcancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer bcancel()
	if out, err := docker(bctx, "build", "--build-arg", "VERSION=container-test", "-t", name, dir); err != nil {
		return "", fmt.Errorf("docker build: %w\n%s", err, out)
	}
	return name, nil
}

// copyRepo copies root's tracked and untracked-but-unignored files to dst.
func copyRepo(root, dst string) error {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("git ls-files: %w", err)
	}
	for _, rel := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if err := copyFile(filepath.Join(root, rel), filepath.Join(dst, rel)); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // deleted in the work tree, not yet in the index
			}
			return err
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil || fi.IsDir() {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// docker runs the docker CLI (BuildKit builds) and returns its combined
// output.
func docker(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Env = append(os.Environ(), "DOCKER_BUILDKIT=1")
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// mustDocker runs docker and fails the test on an error.
func mustDocker(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out, err := docker(ctx, args...)
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// needImage skips the test (or fails it under CI=true) without the image.
func needImage(t testing.TB) {
	t.Helper()
	if image.err == nil {
		return
	}
	if ci() || !errors.Is(image.err, errNoEngine) {
		t.Fatalf("image: %v", image.err)
	}
	t.Skipf("image unavailable: %v", image.err)
}
