package policy

import "fmt"

// IdentityKind names one source of a caller's identity.
type IdentityKind string

// Identity sources, in the spelling of the policy file.
const (
	// IdentityTenantHeader: a request header naming the tenant, set by an
	// authenticating filter; the value is the scope as it is.
	IdentityTenantHeader IdentityKind = "tenant_header"
	// IdentityAPIKey: a request header carrying an API key; only its
	// SHA-256 is used (never the key in clear in keys, logs or labels).
	IdentityAPIKey IdentityKind = "api_key_header"
	// IdentityPrincipal: the mTLS peer principal Envoy passes
	// (attributes.source.principal, a SPIFFE ID in a mesh).
	IdentityPrincipal IdentityKind = "principal"
	// IdentityJWTClaim: a claim of the JWT payload Envoy's jwt_authn filter
	// put in its metadata (payload_in_metadata), passed to ext_authz with
	// metadata_context_namespaces.
	IdentityJWTClaim IdentityKind = "jwt_claim"
	// IdentityContextExtension: a key of the route's ext_authz
	// context_extensions (set by Envoy's configuration, not the client).
	IdentityContextExtension IdentityKind = "context_extension"
	// IdentityClientAddress: the client's IP address (attributes.source.address,
	// or x-forwarded-for behind TrustedHops trusted proxies).
	IdentityClientAddress IdentityKind = "client_address"
)

// JWTAuthnNamespace is the metadata namespace of Envoy's jwt_authn filter.
const JWTAuthnNamespace = "envoy.filters.http.jwt_authn"

// IdentitySource is one link of the identity chain.
type IdentitySource struct {
	Kind IdentityKind
	// Header is the header of tenant_header and api_key_header (lower case).
	Header string
	// MetadataKey is jwt_authn's payload_in_metadata name, Claim the claim
	// read from that payload (jwt_claim).
	MetadataKey, Claim string
	// Extension is the context_extensions key (context_extension).
	Extension string
	// TrustedHops is the number of trusted proxies that append to
	// x-forwarded-for in front of Envoy (client_address): 0 takes Envoy's
	// peer address; N takes the Nth address from the right of
	// x-forwarded-for.
	TrustedHops int
}

// Identity is the ordered chain of sources naming the caller of an HTTP
// request: the first present one wins. It scopes the HTTP rate limits and
// the Idempotency-Key records.
type Identity struct {
	Sources []IdentitySource
	// MissingStatus answers an Idempotency-Key request whose caller no
	// source names: 401 (default) or 400. Rate limits fall back to the
	// client address instead.
	MissingStatus int
}

// DefaultIdentityMissingStatus is Identity.MissingStatus when unset.
const DefaultIdentityMissingStatus = 401

// identity reads the `identity` section.
func (d *decoder) identity(f field) Identity {
	id := Identity{MissingStatus: DefaultIdentityMissingStatus}
	for _, kv := range d.fields(f.node, f.path) {
		switch kv.key {
		case "sources":
			for _, item := range d.items(kv) {
				if s, ok := d.identitySource(item); ok {
					id.Sources = append(id.Sources, s)
				}
			}
			if len(id.Sources) == 0 {
				d.problem(kv.line, kv.path, "must list at least one source")
			}
		case "missing_status":
			if n := d.integer(kv); n == 400 || n == 401 {
				id.MissingStatus = int(n)
			} else {
				d.problem(kv.line, kv.path, "must be 400 or 401, got %d", n)
			}
		default:
			d.unknown(kv)
		}
	}
	return id
}

// identitySource reads one item of `sources`: a mapping with exactly one key.
func (d *decoder) identitySource(f field) (IdentitySource, bool) {
	fs := d.fields(f.node, f.path)
	if len(fs) != 1 {
		d.problem(f.line, f.path, "a source is one of tenant_header, api_key_header, principal, jwt_claim, context_extension, client_address")
		return IdentitySource{}, false
	}
	kv := fs[0]
	s := IdentitySource{Kind: IdentityKind(kv.key)}
	switch s.Kind {
	case IdentityTenantHeader, IdentityAPIKey:
		s.Header = d.headerName(kv)
	case IdentityPrincipal:
		if !d.boolean(kv) {
			return s, false // principal: false lists nothing
		}
	case IdentityContextExtension:
		if s.Extension = d.str(kv); s.Extension == "" {
			d.problem(kv.line, kv.path, "must name a context_extensions key")
		}
	case IdentityJWTClaim:
		d.jwtClaim(kv, &s)
	case IdentityClientAddress:
		d.clientAddress(kv, &s)
	default:
		d.unknown(kv)
		return s, false
	}
	return s, true
}

func (d *decoder) jwtClaim(f field, s *IdentitySource) {
	for _, kv := range d.fields(f.node, f.path) {
		switch kv.key {
		case "metadata_key":
			s.MetadataKey = d.str(kv)
		case "claim":
			s.Claim = d.str(kv)
		default:
			d.unknown(kv)
		}
	}
	if s.MetadataKey == "" || s.Claim == "" {
		d.problem(f.line, f.path, "needs metadata_key (jwt_authn's payload_in_metadata) and claim")
	}
}

func (d *decoder) clientAddress(f field, s *IdentitySource) {
	for _, kv := range d.fields(f.node, f.path) {
		switch kv.key {
		case "xff_trusted_hops":
			n := d.integer(kv)
			if n < 0 || n > 16 {
				d.problem(kv.line, kv.path, "must be between 0 and 16, got %d", n)
				n = 0
			}
			s.TrustedHops = int(n)
		default:
			d.unknown(kv)
		}
	}
}

// legacyIdentity maps the older `tenant` section onto the chain: its
// header, then the principal, then the context extension, in the order it
// always tried them. Its `default` no longer names a scope: a request no
// source names is answered MissingStatus on Idempotency-Key routes, and
// rate-limited by its client address.
func legacyIdentity(t TenantSource) Identity {
	id := Identity{MissingStatus: DefaultIdentityMissingStatus}
	if t.Header != "" {
		id.Sources = append(id.Sources, IdentitySource{Kind: IdentityTenantHeader, Header: t.Header})
	}
	if t.Principal {
		id.Sources = append(id.Sources, IdentitySource{Kind: IdentityPrincipal})
	}
	if t.ContextExtension != "" {
		id.Sources = append(id.Sources, IdentitySource{Kind: IdentityContextExtension, Extension: t.ContextExtension})
	}
	return id
}

// String describes a source for logs and errors.
func (s IdentitySource) String() string {
	switch s.Kind {
	case IdentityTenantHeader, IdentityAPIKey:
		return fmt.Sprintf("%s %s", s.Kind, s.Header)
	case IdentityJWTClaim:
		return fmt.Sprintf("%s %s.%s", s.Kind, s.MetadataKey, s.Claim)
	}
	return string(s.Kind)
}
