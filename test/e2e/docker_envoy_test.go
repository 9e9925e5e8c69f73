package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// envoyImage is the Envoy image docker-compose.yaml and docs/envoy.md run.
const envoyImage = "envoyproxy/envoy:v1.40-latest"

// envoyDockerRun is docs/envoy.md's `docker run` of Envoy, on the host's
// network instead of a user-defined one (the stack's processes listen on
// loopback): the configuration cfgPath mounted read-only at
// /etc/envoy/envoy.yaml, the files it names (the test JWKS, the EDS
// directory) at their own paths, read-only; then Envoy's flags.
func envoyDockerRun(name, cfgPath string, files, envoyArgs []string) []string {
	args := []string{"run", "--rm", "--name", name, "--network", "host",
		"-v", cfgPath + ":/etc/envoy/envoy.yaml:ro"}
	for _, f := range files {
		args = append(args, "-v", f+":"+f+":ro")
	}
	args = append(args, envoyImage, "-c", "/etc/envoy/envoy.yaml")
	return append(args, envoyArgs...)
}

// startDockerEnvoy runs Envoy with envoyDockerRun; its output (server log
// and access log) goes to the process's log. The container is removed when
// the test ends, also when the docker client was killed.
func (s *stack) startDockerEnvoy(name, cfgPath string, envoyArgs []string) *proc {
	s.t.Helper()
	container := fmt.Sprintf("extauthz-e2e-%s-%d-%d", name, os.Getpid(), time.Now().UnixNano())
	files := []string{testIDP.jwks}
	if s.edsPath != "" {
		files = append(files, filepath.Dir(s.edsPath))
	}
	p := startProc(s.t, s.dir, name, "docker", envoyDockerRun(container, cfgPath, files, envoyArgs), nil)
	s.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = exec.CommandContext(ctx, "docker", "rm", "-f", container).Run()
	})
	return p
}

// TestEnvoyDockerRunMatchesDocs keeps E2E_ENVOY=docker's `docker run` the
// one docs/envoy.md gives users: the same image, the configuration mounted
// read-only at the same path, and the same -c.
func TestEnvoyDockerRunMatchesDocs(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(deps.root, "docs", "envoy.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.ReplaceAll(string(b), "\\\n", " ")
	var line string
	for _, l := range strings.Split(doc, "\n") {
		if strings.Contains(l, "docker run --rm --name envoy") {
			line = strings.Join(strings.Fields(l), " ")
			break
		}
	}
	if line == "" {
		t.Fatal("docs/envoy.md has no `docker run --rm --name envoy` line")
	}
	got := strings.Join(envoyDockerRun("envoy", "CFG", nil, nil), " ")
	for _, want := range []string{
		":/etc/envoy/envoy.yaml:ro",
		envoyImage + " -c /etc/envoy/envoy.yaml",
	} {
		if !strings.Contains(line, want) {
			t.Errorf("docs/envoy.md's line %q lacks %q", line, want)
		}
		if !strings.Contains(got, want) {
			t.Errorf("E2E_ENVOY=docker's %q lacks %q", got, want)
		}
	}
}
