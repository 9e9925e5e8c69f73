package k8s

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"sigs.k8s.io/yaml"
)

// descriptorNode is the part of an envoyproxy/ratelimit descriptor tree
// that matching needs. The policy loader owns the full format; here only
// the shape matters, so unknown fields are allowed.
type descriptorNode struct {
	Key         string           `json:"key"`
	Value       string           `json:"value"`
	RateLimit   map[string]any   `json:"rate_limit"`
	Descriptors []descriptorNode `json:"descriptors"`
}

type policyFile struct {
	Domain      string           `json:"domain"`
	Descriptors []descriptorNode `json:"descriptors"`
}

// descriptorTrees holds the policy's descriptor trees by domain.
type descriptorTrees map[string][]descriptorNode

func loadPolicy(t testing.TB) descriptorTrees {
	t.Helper()
	dir := filepath.Join(repoRoot(t), policyDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	trees := descriptorTrees{}
	for _, e := range entries {
		var f policyFile
		if err := yaml.Unmarshal(readFile(t, filepath.Join(dir, e.Name())), &f); err != nil {
			t.Fatalf("%s/%s: %v", policyDir, e.Name(), err)
		}
		if f.Domain != "" {
			trees[f.Domain] = append(trees[f.Domain], f.Descriptors...)
		}
	}
	return trees
}

func policyDomains(t testing.TB) []string {
	t.Helper()
	var out []string
	for d := range loadPolicy(t) {
		out = append(out, d)
	}
	return out
}

// domainTree is the descriptor tree of the one domain the EnvoyFilter uses.
type domainTree []descriptorNode

func policyDescriptors(t testing.TB) domainTree {
	t.Helper()
	trees := loadPolicy(t)
	if len(trees) != 1 {
		t.Fatalf("%s defines %d domains; the mesh uses one", policyDir, len(trees))
	}
	for _, tree := range trees {
		return tree
	}
	return nil
}

// entry is a descriptor entry Envoy will send; Value is empty when it comes
// from the request (any value).
type entry struct{ Key, Value string }

// limits reports whether a descriptor with these entries ends on a node
// with a rate limit, matching level by level as envoyproxy/ratelimit does:
// a node with the exact value, else the key-only node.
func (tree domainTree) limits(entries []entry) bool {
	nodes := []descriptorNode(tree)
	var last *descriptorNode
	for _, e := range entries {
		last = nil
		for i := range nodes {
			n := &nodes[i]
			if n.Key == e.Key && (n.Value == "" || (e.Value != "" && n.Value == e.Value)) {
				if last == nil || n.Value != "" {
					last = n
				}
			}
		}
		if last == nil {
			return false
		}
		nodes = last.Descriptors
	}
	return last != nil && last.RateLimit != nil
}

// stripTenant drops a leading tenant entry the way extauthz's RLS does:
// when the domain has no top-level descriptor with the tenant key, that
// entry's value scopes the counters and is not matched.
func (tree domainTree) stripTenant(entries []entry, tenantKey string) []entry {
	if tenantKey == "" || len(entries) == 0 || entries[0].Key != tenantKey {
		return entries
	}
	for _, n := range tree {
		if n.Key == tenantKey {
			return entries
		}
	}
	return entries[1:]
}

// descriptorEntries lists the entries one route rate_limits entry produces.
func descriptorEntries(rl *routev3.RateLimit) ([]entry, error) {
	var out []entry
	for _, a := range rl.GetActions() {
		switch {
		case a.GetRequestHeaders() != nil:
			out = append(out, entry{Key: a.GetRequestHeaders().GetDescriptorKey()})
		case a.GetGenericKey() != nil:
			g := a.GetGenericKey()
			out = append(out, entry{Key: orDefault(g.GetDescriptorKey(), "generic_key"), Value: g.GetDescriptorValue()})
		case a.GetRemoteAddress() != nil:
			out = append(out, entry{Key: "remote_address"})
		case a.GetHeaderValueMatch() != nil:
			h := a.GetHeaderValueMatch()
			out = append(out, entry{Key: orDefault(h.GetDescriptorKey(), "header_match"), Value: h.GetDescriptorValue()})
		default:
			return nil, fmt.Errorf("action %v: teach the test which entry it yields", a)
		}
	}
	return out, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// TestDescriptorMatching pins the matcher the EnvoyFilter check relies on.
func TestDescriptorMatching(t *testing.T) {
	t.Parallel()
	var tree domainTree
	const policy = `
- key: tenant
  rate_limit: {unit: second, requests_per_unit: 1}
  descriptors:
    - key: authority
      rate_limit: {unit: minute, requests_per_unit: 1}
- key: generic_key
  value: api
  descriptors:
    - key: path
      rate_limit: {unit: second, requests_per_unit: 1}
`
	if err := yaml.Unmarshal([]byte(policy), &tree); err != nil {
		t.Fatal(err)
	}
	noTenant := domainTree{{Key: "path"}}
	if got := noTenant.stripTenant([]entry{{Key: "tenant"}, {Key: "path"}}, "tenant"); len(got) != 1 || got[0].Key != "path" {
		t.Errorf("the tenant entry of a domain without a tenant descriptor was not stripped: %v", got)
	}
	if got := tree.stripTenant([]entry{{Key: "tenant"}}, "tenant"); len(got) != 1 {
		t.Errorf("a domain with a top-level tenant descriptor matches the entry: %v", got)
	}
	for _, tc := range []struct {
		entries []entry
		want    bool
	}{
		{[]entry{{Key: "tenant"}}, true},
		{[]entry{{Key: "tenant"}, {Key: "authority"}}, true},
		{[]entry{{Key: "tenant"}, {Key: "path"}}, false},
		{[]entry{{Key: "authority"}}, false},
		{[]entry{{Key: "generic_key", Value: "api"}}, false}, // no limit at that level
		{[]entry{{Key: "generic_key", Value: "api"}, {Key: "path"}}, true},
		{[]entry{{Key: "generic_key", Value: "web"}, {Key: "path"}}, false},
	} {
		if got := tree.limits(tc.entries); got != tc.want {
			t.Errorf("limits(%v) = %v, want %v", tc.entries, got, tc.want)
		}
	}
}
