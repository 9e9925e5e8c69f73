package policy

import (
	"strings"
	"testing"
)

func TestIdentitySection(t *testing.T) {
	t.Parallel()
	h := mustLoad(t, "http.yaml", `
http:
  identity:
    sources:
      - api_key_header: X-Api-Key
      - tenant_header: x-tenant-id
      - jwt_claim: {metadata_key: jwt_payload, claim: sub}
      - principal: true
      - context_extension: tenant
      - client_address: {xff_trusted_hops: 2}
  routes: [{name: r, path_prefix: /}]
`).HTTP
	want := []IdentitySource{
		{Kind: IdentityAPIKey, Header: "x-api-key"},
		{Kind: IdentityTenantHeader, Header: "x-tenant-id"},
		{Kind: IdentityJWTClaim, MetadataKey: "jwt_payload", Claim: "sub"},
		{Kind: IdentityPrincipal},
		{Kind: IdentityContextExtension, Extension: "tenant"},
		{Kind: IdentityClientAddress, TrustedHops: 2},
	}
	if len(h.Identity.Sources) != len(want) {
		t.Fatalf("sources %+v, want %+v", h.Identity.Sources, want)
	}
	for i := range want {
		if h.Identity.Sources[i] != want[i] {
			t.Errorf("sources[%d] = %+v, want %+v", i, h.Identity.Sources[i], want[i])
		}
	}
	if h.Identity.MissingStatus != 401 {
		t.Errorf("missing_status %d, want the default 401", h.Identity.MissingStatus)
	}
}

// The older tenant section still loads, mapped onto the chain in its own
// order; its default no longer names a scope.
func TestLegacyTenantMapsOntoTheChain(t *testing.T) {
	t.Parallel()
	h := mustLoad(t, "http.yaml", `
http:
  tenant: {header: X-Tenant-Id, principal: true, context_extension: t, default: anonymous}
  routes: [{name: r, path_prefix: /}]
`).HTTP
	want := []IdentitySource{{Kind: IdentityTenantHeader, Header: "x-tenant-id"}, {Kind: IdentityPrincipal}, {Kind: IdentityContextExtension, Extension: "t"}}
	if len(h.Identity.Sources) != 3 || h.Identity.Sources[0] != want[0] || h.Identity.Sources[1] != want[1] || h.Identity.Sources[2] != want[2] {
		t.Errorf("sources %+v, want %+v", h.Identity.Sources, want)
	}
	none := mustLoad(t, "http.yaml", "http:\n  routes: [{name: r, path_prefix: /}]\n").HTTP
	if len(none.Identity.Sources) != 0 || none.Identity.MissingStatus != 401 {
		t.Errorf("no tenant, no identity: %+v", none.Identity)
	}
}

func TestIdentityErrors(t *testing.T) {
	t.Parallel()
	const head = "http:\n  routes: [{name: r, path_prefix: /}]\n  identity:\n    "
	tests := []struct{ name, yaml, field, msg string }{
		{"both forms", "http:\n  tenant: {header: x}\n  identity: {sources: [{principal: true}]}\n  routes: [{name: r, path_prefix: /}]", "http.tenant", "not both"},
		{"no sources", head + "sources: []", "http.identity.sources", "at least one source"},
		{"unknown source", head + "sources: [{cookie: c}]", "http.identity.sources[0].cookie", "unknown field"},
		{"two keys in one source", head + "sources: [{principal: true, tenant_header: x}]", "http.identity.sources[0]", "a source is one of"},
		{"bad header name", head + "sources: [{api_key_header: 'x key'}]", "http.identity.sources[0].api_key_header", "not a valid header name"},
		{"jwt without claim", head + "sources: [{jwt_claim: {metadata_key: p}}]", "http.identity.sources[0].jwt_claim", "needs metadata_key"},
		{"negative hops", head + "sources: [{client_address: {xff_trusted_hops: -1}}]", "xff_trusted_hops", "between 0 and 16"},
		{"missing_status 403", head + "sources: [{principal: true}]\n    missing_status: 403", "http.identity.missing_status", "400 or 401"},
		{"unknown identity field", head + "source: []", "http.identity.source", "unknown field"},
	}
	for _, tc := range tests {
		msg, _ := loadErr(t, "p.yaml", tc.yaml)
		if !strings.Contains(msg, tc.field) || !strings.Contains(msg, tc.msg) || !strings.Contains(msg, "p.yaml") {
			t.Errorf("%s: error %q, want file, %q and %q", tc.name, msg, tc.field, tc.msg)
		}
	}
}

// TestLoaderHostileInput: odd bytes in a policy file are loaded or
// rejected with an error naming the file, never a panic; what loads means
// what it says.
func TestLoaderHostileInput(t *testing.T) {
	t.Parallel()
	bad := []struct{ name, yaml string }{
		{"invalid UTF-8", "domain: \xff\xfe\ndescriptors: [{key: a}]"},
		{"NUL byte", "domain: a\x00b\ndescriptors: [{key: a}]"},
		{"tab indentation", "domain: d\ndescriptors:\n\t- key: a"},
		{"exempt prefix without slash", "http:\n  exempt: {path_prefixes: [healthz]}\n  routes: [{name: r, path_prefix: /}]"},
		{"route host wildcard in the middle", "http:\n  routes: [{name: r, path_prefix: /, hosts: ['a*b.com']}]"},
		{"hops too large", "http:\n  identity: {sources: [{client_address: {xff_trusted_hops: 99999999999999999999}}]}\n  routes: [{name: r, path_prefix: /}]"},
	}
	for _, tc := range bad {
		if msg, _ := loadErr(t, "hostile.yaml", tc.yaml); !strings.Contains(msg, "hostile.yaml") {
			t.Errorf("%s: error %q does not name the file", tc.name, msg)
		}
	}
	// Separators and long values in descriptor values load, and match
	// exactly themselves.
	long := strings.Repeat("v", 4096)
	p := mustLoad(t, "ok.yaml", "domain: d\ndescriptors:\n  - {key: 'k{|}:%', value: 'v{|}:%#=', rate_limit: {unit: second, requests_per_unit: 1}}\n  - {key: long, value: '"+long+"', rate_limit: {unit: second, requests_per_unit: 1}}\n")
	d := p.Domain("d")
	for _, e := range [][]string{{"k{|}:%", "v{|}:%#="}, {"long", long}} {
		if _, ok := d.Match(entries(e...)); !ok {
			t.Errorf("%q does not match itself", e[0])
		}
	}
	for _, e := range [][]string{{"k{|}:%", "v{|}:%#"}, {"k{|}", "v{|}:%#="}, {"long", long[1:]}} {
		if _, ok := d.Match(entries(e...)); ok {
			t.Errorf("%q matched another value", e)
		}
	}
}
