package container

import (
	"os"
	"path/filepath"
	"testing"
)

// planted are files a working copy can hold that must never reach the
// build context: caches, binaries and profiles, and secrets.
var planted = []string{
	".cache/devjwt/key.pem",            // cmd/devjwt's private key
	".cache/go-build/00/cached-object", // a tool cache
	".env",                             // docker compose's variables, often secrets
	"deploy/tls.key",                   // a private key
	"cmd/extauthz/server.pem",          // a certificate bundle beside the code
	"extauthz",                         // `go build ./cmd/extauthz` at the root
	"bin/extauthz",                     // `make build`
	"cmd/extauthz/extauthz.test",       // `go test -c` in a package
	"pkg/ratelimit/cpu.prof",           // `go test -cpuprofile` in a package
	"pkg/ratelimit/coverage.out",       // a coverage profile
	".git/config",                      // the repository itself
}

// TestBuildContextExcludes builds, from a copy of the repository with the
// planted files added, a Dockerfile that exports its whole build context
// (FROM scratch, COPY . /, --output type=local): the shipped .dockerignore
// keeps every planted file out, and the build's inputs in.
func TestBuildContextExcludes(t *testing.T) {
	t.Parallel()
	needImage(t)
	ctxDir, out := t.TempDir(), t.TempDir()
	if err := copyRepo(image.root, ctxDir); err != nil {
		t.Fatal(err)
	}
	for _, p := range planted {
		path := filepath.Join(ctxDir, p)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("planted by TestBuildContextExcludes\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Outside the context, so that the context's own .dockerignore applies.
	dockerfile := filepath.Join(t.TempDir(), "Dockerfile")
	if err := os.WriteFile(dockerfile, []byte("FROM scratch\nCOPY . /\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustDocker(t, "build", "-f", dockerfile, "--output", "type=local,dest="+out, ctxDir)

	for _, p := range planted {
		if _, err := os.Stat(filepath.Join(out, p)); err == nil {
			t.Errorf("%s is in the build context", p)
		}
	}
	for _, p := range []string{"go.mod", "go.sum", "cmd/extauthz/main.go", "examples/policy/edge.yaml"} {
		if _, err := os.Stat(filepath.Join(out, p)); err != nil {
			t.Errorf("%s, a build input, is not in the build context: %v", p, err)
		}
	}
}
