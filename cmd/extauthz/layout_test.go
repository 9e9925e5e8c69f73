package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// module is this repository's module path.
const module = "github.com/extauthz/extauthz"

// imports lists, for each package matching patterns, its transitive
// (non-test) dependencies and, withTests, its test files' direct imports,
// as the go command resolves them from the module root.
func imports(t *testing.T, withTests bool, patterns ...string) map[string][]string {
	t.Helper()
	format := "{{.ImportPath}}{{range .Deps}} {{.}}{{end}}"
	if withTests {
		format += "{{range .TestImports}} {{.}}{{end}}{{range .XTestImports}} {{.}}{{end}}"
	}
	args := append([]string{"list", "-f", format}, patterns...)
	cmd := exec.Command("go", args...)
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v", patterns, err)
	}
	deps := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		deps[f[0]] = f[1:]
	}
	return deps
}

// offending returns the imports of pkgs under any of the prefixes.
func offending(pkgs map[string][]string, prefixes ...string) map[string][]string {
	bad := map[string][]string{}
	for pkg, deps := range pkgs {
		for _, d := range deps {
			for _, p := range prefixes {
				if d == p || strings.HasPrefix(d, p+"/") {
					bad[pkg] = append(bad[pkg], d)
				}
			}
		}
	}
	return bad
}

// DESIGN §2: internal/ holds helpers that pkg/ may import, so it imports
// nothing from pkg/.
func TestInternalImportsNothingFromPkg(t *testing.T) {
	t.Parallel()
	pkgs := imports(t, true, "./internal/...")
	if _, ok := pkgs[module+"/internal/tracing"]; !ok {
		t.Fatalf("go list ./internal/... missed internal/tracing: %v", pkgs)
	}
	for pkg, deps := range offending(pkgs, module+"/pkg") {
		t.Errorf("%s imports %v", pkg, deps)
	}
}

// DESIGN §2: pkg/ratelimit and pkg/idempotency import nothing from
// go-control-plane or gRPC; only pkg/envoy translates Envoy's protos.
func TestCoreImportsNoEnvoyNorGRPC(t *testing.T) {
	t.Parallel()
	pkgs := imports(t, true, "./pkg/ratelimit/...", "./pkg/idempotency/...")
	for _, want := range []string{"/pkg/ratelimit", "/pkg/ratelimit/redisstore", "/pkg/ratelimit/inflight", "/pkg/ratelimit/inflight/redisstore", "/pkg/idempotency", "/pkg/idempotency/redisstore"} {
		if _, ok := pkgs[module+want]; !ok {
			t.Fatalf("go list missed %s: %v", want, pkgs)
		}
	}
	for pkg, deps := range offending(pkgs, "github.com/envoyproxy/go-control-plane", "google.golang.org/grpc") {
		t.Errorf("%s imports %v", pkg, deps)
	}
}

// DESIGN §2: pkg/envoy splits along one seam. The RLS side and the
// ext_authz + ext_proc side each import the shared core, never each other,
// and the core imports neither.
func TestEnvoySidesImportOnlyTheCore(t *testing.T) {
	t.Parallel()
	rls, authz := module+"/pkg/envoy/rls", module+"/pkg/envoy/authz"
	// Tests may join the sides (the tracing tests serve both); the packages
	// themselves may not.
	pkgs := imports(t, false, "./pkg/envoy/...")
	for pkg, forbidden := range map[string][]string{
		module + "/pkg/envoy": {rls, authz},
		rls:                   {authz},
		authz:                 {rls},
	} {
		deps, ok := pkgs[pkg]
		if !ok {
			t.Fatalf("go list missed %s: %v", pkg, pkgs)
		}
		for pkg, bad := range offending(map[string][]string{pkg: deps}, forbidden...) {
			t.Errorf("%s imports %v", pkg, bad)
		}
	}
}

// pkg/admin calls the servers' Explain with plain values (rls.Query,
// authz.HTTPRequest): translating to Envoy's protos stays in pkg/envoy.
func TestAdminImportsNoEnvoyProtos(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, "./pkg/admin")
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, imp := range strings.Fields(string(out)) {
		if strings.HasPrefix(imp, "github.com/envoyproxy/go-control-plane") || strings.HasPrefix(imp, "google.golang.org/grpc") {
			t.Errorf("pkg/admin imports %s", imp)
		}
	}
}
