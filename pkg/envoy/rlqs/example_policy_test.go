package rlqs

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/extauthz/extauthz/pkg/policy"
)

// rlqsFilter is what envoy/rlqs.yaml's rate_limit_quota filter says about
// its buckets: the domain, and the keys of each bucket_id_builder.
type rlqsFilter struct {
	domain string
	keys   [][]string
}

// readRLQSFilter walks envoy/rlqs.yaml for the filter's domain and bucket
// ID keys, so that the test follows the file rather than a copy of it.
func readRLQSFilter(t *testing.T) rlqsFilter {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", "..", "envoy", "rlqs.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(src, &doc); err != nil {
		t.Fatal(err)
	}
	var f rlqsFilter
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if d, ok := v["domain"].(string); ok && v["rlqs_server"] != nil {
				f.domain = d
			}
			// BucketIdBuilder's map field is also named bucket_id_builder:
			// the innermost one holds the keys.
			if b, ok := v["bucket_id_builder"].(map[string]any); ok && b["bucket_id_builder"] == nil {
				var keys []string
				for k := range b {
					keys = append(keys, k)
				}
				f.keys = append(f.keys, keys)
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(doc)
	if f.domain == "" || len(f.keys) == 0 {
		t.Fatalf("envoy/rlqs.yaml: no rate_limit_quota domain or bucket_id_builder found (%+v)", f)
	}
	return f
}

// TestShippedPolicyServesShippedEnvoy: examples/policy (what `make run` and
// the image serve) has the domain envoy/rlqs.yaml names, and every bucket
// that config builds gets a share of a rule: acme its 40/s, any other tenant
// 10/s, the suspended one DENY_ALL.
func TestShippedPolicyServesShippedEnvoy(t *testing.T) {
	t.Parallel()
	f := readRLQSFilter(t)
	p, err := policy.Load(filepath.Join("..", "..", "..", "examples", "policy"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Domain(f.domain) == nil {
		t.Fatalf("examples/policy has no domain %q, the one envoy/rlqs.yaml reports in", f.domain)
	}
	if len(f.keys) != 1 || len(f.keys[0]) != 1 || f.keys[0][0] != "tenant" {
		t.Fatalf("envoy/rlqs.yaml builds bucket IDs %v; this test sends {tenant: <x>}: update both", f.keys)
	}
	h := newHarness(t, Options{Policy: func() *policy.Policy { return p }, TenantKey: "tenant"}, nil)
	c := h.open(t)
	send(t, c, f.domain, usage(acme, 1, 0), usage(map[string]string{"tenant": "globex"}, 1, 0),
		usage(map[string]string{"tenant": "suspended"}, 1, 0))
	got := recv(t, c)
	if g := tokensOf(got["acme"]); g != (tokens{2400, time.Minute, 40}) {
		t.Errorf("acme: %+v, want 40/s (2400 per minute, burst 40)", g)
	}
	if g := tokensOf(got["globex"]); g != (tokens{600, time.Minute, 10}) {
		t.Errorf("globex: %+v, want 10/s (600 per minute, burst 10)", g)
	}
	if g := blanket(got["suspended"]); g != "DENY_ALL" {
		t.Errorf("suspended: %q, want DENY_ALL", g)
	}
}
