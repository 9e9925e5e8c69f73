package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/extauthz/extauthz/internal/devjwt"
	"github.com/extauthz/extauthz/pkg/policy"
)

// envoyFiles lists every configuration users copy.
func envoyFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(deps.root, "envoy", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no envoy/*.yaml: %v", err)
	}
	return files
}

// validate runs envoy --mode validate on a file.
func validate(t *testing.T, path string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, deps.envoy, "--mode", "validate", "-c", path,
		"--disable-hot-restart", "--log-level", "warn").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "OK") {
		t.Fatalf("envoy --mode validate -c %s: %v\n%s", path, err, out)
	}
}

// Every file in envoy/ is accepted by the real binary as it stands, and so
// is its rendering for the tests (with and without the extauthz filters).
func TestEnvoyConfigsValidate(t *testing.T) {
	needEnvoy(t)
	for _, f := range envoyFiles(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			validate(t, f)
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, strip := range []bool{false, true} {
				out, err := renderEnvoy(src, testSpec(filepath.Base(f), strip))
				if err != nil {
					t.Fatal(err)
				}
				p := filepath.Join(t.TempDir(), "rendered.yaml")
				if err := os.WriteFile(p, out, 0o600); err != nil {
					t.Fatal(err)
				}
				validate(t, p)
			}
		})
	}
}

// The copy cmd/devjwt writes for docker compose (front-proxy.yaml, its
// provider reading a local key set) is accepted by the real binary.
func TestDevJWTFrontProxyValidates(t *testing.T) {
	needEnvoy(t)
	t.Parallel()
	src, err := os.ReadFile(filepath.Join(deps.root, "envoy", "front-proxy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := devjwt.UseLocalJWKS(src, testIDP.jwks)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "front-proxy.yaml")
	if err := os.WriteFile(p, out, 0o600); err != nil {
		t.Fatal(err)
	}
	validate(t, p)
}

func testSpec(config string, strip bool) renderSpec {
	spec := renderSpec{
		adminPort:     19901,
		listenerPorts: map[string]int{listenerName(config): 19000},
		endpoints: map[string][]string{
			"extauthz": {"127.0.0.1:19001", "127.0.0.1:19002"},
			"upstream": {"127.0.0.1:19080"},
		},
		stripFilters: strip,
		jwks:         testIDP.jwks,
	}
	if hasIDPCluster(config) {
		spec.endpoints["idp"] = []string{"127.0.0.1:19004"}
	}
	if hasReplayCluster(config) {
		spec.endpoints["extauthz_replay"] = []string{"127.0.0.1:19003"}
	}
	return spec
}

// shape is what rendering an envoy/ file must leave: its socket addresses
// (admin, listener, the two extauthz endpoints, extauthz_replay when the
// file has it, the identity provider when it has one, upstream) and its
// HTTP filters.
func shape(config string) (addrs, filters int) {
	switch config {
	case "rlqs.yaml":
		return 5, 2 // rate_limit_quota, router
	case "front-proxy.yaml":
		return 7, 5 // jwt_authn, ratelimit, ext_authz, ext_proc, router
	}
	return 6, 4 // ratelimit, ext_authz, ext_proc, router
}

// Rendering leaves no DNS name, no non-loopback address and no original
// port behind, and keeps every filter unless asked to strip them.
func TestRenderEnvoy(t *testing.T) {
	for _, f := range envoyFiles(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			out, err := renderEnvoy(src, testSpec(filepath.Base(f), false))
			if err != nil {
				t.Fatal(err)
			}
			var doc any
			if err := yaml.Unmarshal(out, &doc); err != nil {
				t.Fatal(err)
			}
			wantAddrs, wantFilters := shape(filepath.Base(f))
			addrs := collect(doc, "socket_address")
			if len(addrs) != wantAddrs {
				t.Fatalf("socket addresses: got %d, want %d: %v", len(addrs), wantAddrs, addrs)
			}
			for _, a := range addrs {
				m := a.(map[string]any)
				if m["address"] != "127.0.0.1" {
					t.Errorf("address %v not substituted", m)
				}
				if p, _ := m["port_value"].(int); p < 19000 || p > 19901 {
					t.Errorf("port %v not substituted", m)
				}
			}
			filters := collect(doc, "http_filters")
			if len(filters) != 1 || len(filters[0].([]any)) != wantFilters {
				t.Errorf("http_filters changed: %v", filters)
			}
			stripped, err := renderEnvoy(src, testSpec(filepath.Base(f), true))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(stripped), "ext_authz.v3.ExtAuthz\"") || strings.Contains(string(stripped), "rate_limits") {
				t.Errorf("stripped config still has extauthz filters")
			}
		})
	}
}

// TestRenderEnvoyCallDeadline: a stack without shippedDeadlines gives every
// call Envoy makes to extauthz the loaded deadline, in the three filters
// that call it, and leaves the upstream's route timeouts alone.
func TestRenderEnvoyCallDeadline(t *testing.T) {
	for _, name := range []string{"front-proxy.yaml", "sidecar.yaml"} {
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(filepath.Join(deps.root, "envoy", name))
			if err != nil {
				t.Fatal(err)
			}
			spec := testSpec(name, false)
			spec.callDeadline = loadedCallDeadline
			out, err := renderEnvoy(src, spec)
			if err != nil {
				t.Fatal(err)
			}
			var doc any
			if err := yaml.Unmarshal(out, &doc); err != nil {
				t.Fatal(err)
			}
			if n := stretchDeadlines(doc, loadedCallDeadline); n != 3 {
				t.Errorf("%d deadlines of calls to extauthz, want 3 (ratelimit, ext_authz, ext_proc)", n)
			}
			for _, v := range append(collect(doc, "message_timeout"), collect(doc, "grpc_service")...) {
				if m, ok := v.(map[string]any); ok {
					v = m["timeout"]
				}
				if v != nil && v != loadedCallDeadline {
					t.Errorf("a call deadline is still %v", v)
				}
			}
			before, _ := renderEnvoy(src, testSpec(name, false))
			if a, b := strings.Count(string(out), "timeout: "+loadedCallDeadline), strings.Count(string(before), "timeout: "+loadedCallDeadline); a != b+3 {
				t.Errorf("%d fields of %s after, %d before: want exactly the 3 call deadlines changed", a, loadedCallDeadline, b)
			}
		})
	}
}

// A cluster the test does not know is an error, not a silent DNS lookup.
func TestRenderEnvoyUnknownCluster(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(deps.root, "envoy", "front-proxy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	spec := testSpec("front-proxy.yaml", false)
	delete(spec.endpoints, "upstream")
	if _, err := renderEnvoy(src, spec); err == nil || !strings.Contains(err.Error(), `cluster "upstream"`) {
		t.Fatalf("err = %v, want one naming cluster \"upstream\"", err)
	}
}

// collect returns every value stored under key anywhere in doc.
func collect(doc any, key string) []any {
	var out []any
	switch v := doc.(type) {
	case map[string]any:
		for k, val := range v {
			if k == key {
				out = append(out, val)
			}
			out = append(out, collect(val, key)...)
		}
	case []any:
		for _, e := range v {
			out = append(out, collect(e, key)...)
		}
	}
	return out
}

// The test policy loads: a broken one would make every scenario fail at
// extauthz start with a less direct message.
func TestPolicyLoads(t *testing.T) {
	p, err := policy.Load(filepath.Join("testdata", "policy"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Domains["edge"] == nil || p.HTTP == nil {
		t.Fatalf("policy lacks domain edge or the http section: %+v", p)
	}
}
