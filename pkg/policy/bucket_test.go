package policy

import (
	"fmt"
	"os"
	"testing"
)

const bucketConfig = `
domain: quota
descriptors:
  - key: tenant
    value: acme
    rate_limit: {unit: second, requests_per_unit: 100}
    descriptors:
      - key: route
        value: orders
        rate_limit: {unit: second, requests_per_unit: 10}
  - key: tenant
    value: team-*
    rate_limit: {unit: minute, requests_per_unit: 600}
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: zone
    descriptors:
      - key: app
        value: web
        rate_limit: {unit: second, requests_per_unit: 7}
  - key: app
    value: api
    descriptors:
      - key: tenant
        value: acme
        rate_limit: {unit: second, requests_per_unit: 3}
`

// A bucket ID has no order: the tree decides it, keys tried in byte order
// at each level, every entry used once, wildcards and key-only defaults as
// in Match.
func TestMatchBucket(t *testing.T) {
	d := mustLoad(t, "quota.yaml", bucketConfig).Domain("quota")
	cases := []struct {
		bucket map[string]string
		rule   string // "" for no match
	}{
		{map[string]string{"tenant": "acme"}, "quota.tenant_acme"},
		{map[string]string{"route": "orders", "tenant": "acme"}, "quota.tenant_acme.route_orders"},
		{map[string]string{"tenant": "team-blue"}, "quota.tenant_team-*"},
		{map[string]string{"tenant": "other"}, "quota.tenant"},
		{map[string]string{"zone": "eu", "app": "web"}, "quota.zone.app_web"},
		// app=api is tried first (byte order) and leads to tenant=acme.
		{map[string]string{"app": "api", "tenant": "acme"}, "quota.app_api.tenant_acme"},
		// app=web has no top-level node: tenant first, then no app level.
		{map[string]string{"app": "web", "tenant": "acme"}, ""},
		{map[string]string{"tenant": "acme", "extra": "x"}, ""},
		{map[string]string{"route": "orders"}, ""},
		{map[string]string{}, ""},
		{nil, ""},
	}
	for _, c := range cases {
		m, ok := d.MatchBucket(c.bucket)
		if got := ruleID(m, ok); got != c.rule {
			t.Errorf("MatchBucket(%v) = %q, want %q", c.bucket, got, c.rule)
		}
	}
}

func ruleID(m Match, ok bool) string {
	if !ok {
		return ""
	}
	return m.Rule.ID
}

// The entries come back in tree order, so that the counter key is the one
// an RLS descriptor walking the same path would use.
func TestMatchBucketEntriesInTreeOrder(t *testing.T) {
	d := mustLoad(t, "quota.yaml", bucketConfig).Domain("quota")
	m, ok := d.MatchBucket(map[string]string{"zone": "eu", "app": "web"})
	if !ok || len(m.KeyEntries) != 2 || m.KeyEntries[0].Key != "zone" || m.KeyEntries[1].Key != "app" {
		t.Fatalf("KeyEntries = %v, %v; want zone then app", m.KeyEntries, ok)
	}
}

// Too many entries match nothing, whatever the tree; a nil domain too.
func TestMatchBucketBounds(t *testing.T) {
	d := mustLoad(t, "quota.yaml", bucketConfig).Domain("quota")
	big := map[string]string{"tenant": "acme"}
	for i := 0; len(big) <= MaxBucketEntries; i++ {
		big[fmt.Sprintf("k%02d", i)] = "v"
	}
	if _, ok := d.MatchBucket(big); ok {
		t.Error("a bucket over MaxBucketEntries matched")
	}
	var nilDomain *Domain
	if _, ok := nilDomain.MatchBucket(map[string]string{"tenant": "acme"}); ok {
		t.Error("a nil domain matched")
	}
}

// Any bucket ID gives an answer without panicking, and a match uses every
// entry of the bucket once, with its own value.
func FuzzMatchBucket(f *testing.F) {
	f.Add("tenant", "acme", "route", "orders", "", "")
	f.Add("app", "api", "tenant", "acme", "zone", "eu")
	f.Add("tenant", "team-blue", "tenant", "x", "k", "")
	d := mustLoadF(f, bucketConfig).Domain("quota")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, k3, v3 string) {
		bucket := map[string]string{k1: v1, k2: v2, k3: v3}
		m, ok := d.MatchBucket(bucket)
		if !ok {
			return
		}
		if len(m.KeyEntries) != len(bucket) {
			t.Fatalf("MatchBucket(%q) used %d entries of %d", bucket, len(m.KeyEntries), len(bucket))
		}
		for _, e := range m.KeyEntries {
			if v, in := bucket[e.Key]; !in || (v != e.Value && !m.Rule.ShareThreshold) {
				t.Fatalf("MatchBucket(%q): entry %v is not the bucket's", bucket, e)
			}
		}
	})
}

func mustLoadF(f *testing.F, content string) *Policy {
	f.Helper()
	dir := f.TempDir()
	path := dir + "/quota.yaml"
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		f.Fatal(err)
	}
	p, err := Load(path)
	if err != nil {
		f.Fatal(err)
	}
	return p
}
