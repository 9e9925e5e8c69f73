package authz

import (
	"crypto/sha256"
	"encoding/hex"
	"net"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/extauthz/extauthz/pkg/policy"
)

// ProblemIdentityMissing is 401 or 400 (policy identity.missing_status), an
// Idempotency-Key request whose caller no identity source names: its key
// would otherwise share one scope with every other unnamed caller's.
const ProblemIdentityMissing = ProblemTypeBase + "identity-missing"

func problemIdentityMissing(status int) *reply {
	if status != 400 {
		status = policy.DefaultIdentityMissingStatus
	}
	return problemReply(Problem{Type: ProblemIdentityMissing, Title: "Caller identity is missing", Status: status,
		Detail: "An Idempotency-Key request must come from an identified caller (tenant, API key, principal or client address, as configured)."})
}

// callerInput is what a request offers the identity chain.
type callerInput struct {
	headers    headerList
	principal  string
	extensions map[string]string
	metadata   *corev3.Metadata // ext_authz metadata_context; nil for ext_proc
	address    string           // Envoy's peer, "ip" or "ip:port"; may be empty
}

// Scope prefixes. A tenant header's value is the scope as it is (as it
// always was), unless it starts with scopeMark; every other source's scope
// starts with scopeMark and its tag. So no value of one source can equal a
// scope of another: a client that picks a tenant header value cannot land
// in an API key's, a principal's or an address's budget or records.
const (
	scopeMark       = "~"
	scopeTenant     = "~t~" // a tenant header value that starts with scopeMark
	scopeAPIKey     = "~k~" // + hex SHA-256 of the key
	scopePrincipal  = "~p~"
	scopeJWT        = "~j~"
	scopeExtension  = "~x~"
	scopeAddress    = "~a~"
	scopeRoute      = "~r~"   // key_scope route: + len(name) + ":" + name + the caller's scope
	scopeUnassigned = "~none" // limits only: neither an identity nor an address
)

// callerScope returns the scope the chain names, or "" when no source is
// present.
func callerScope(id policy.Identity, in callerInput) string {
	for _, s := range id.Sources {
		if scope := sourceScope(s, in); scope != "" {
			return scope
		}
	}
	return ""
}

// limitScope is the scope of the HTTP rate limits: the caller's, else the
// client address (never one scope shared by every unnamed caller; Envoy
// always sends the address, so scopeUnassigned is for foreign callers).
func limitScope(scope string, in callerInput) string {
	switch {
	case scope != "":
		return scope
	case addressScope(in, 0) != "":
		return addressScope(in, 0)
	}
	return scopeUnassigned
}

func sourceScope(s policy.IdentitySource, in callerInput) string {
	switch s.Kind {
	case policy.IdentityTenantHeader:
		v := headerValue(in.headers, s.Header)
		if strings.HasPrefix(v, scopeMark) {
			return scopeTenant + v
		}
		return v
	case policy.IdentityAPIKey:
		if v := headerValue(in.headers, s.Header); v != "" {
			sum := sha256.Sum256([]byte(v))
			return scopeAPIKey + hex.EncodeToString(sum[:])
		}
	case policy.IdentityPrincipal:
		return tagged(scopePrincipal, in.principal)
	case policy.IdentityJWTClaim:
		return tagged(scopeJWT, jwtClaim(in.metadata, s.MetadataKey, s.Claim))
	case policy.IdentityContextExtension:
		return tagged(scopeExtension, in.extensions[s.Extension])
	case policy.IdentityClientAddress:
		return addressScope(in, s.TrustedHops)
	}
	return ""
}

func tagged(tag, v string) string {
	if v == "" {
		return ""
	}
	return tag + v
}

// headerValue is every value of name joined by commas, as Envoy joins
// repeated headers in ext_authz's header map: the same request gives the
// same scope whichever form Envoy sent.
func headerValue(hs headerList, name string) string {
	return strings.Join(hs.values(name), ",")
}

// jwtClaim reads a string or number claim of the payload jwt_authn stored
// under key.
func jwtClaim(md *corev3.Metadata, key, claim string) string {
	payload := md.GetFilterMetadata()[policy.JWTAuthnNamespace].GetFields()[key].GetStructValue()
	switch v := payload.GetFields()[claim].GetKind().(type) {
	case *structpb.Value_StringValue:
		return v.StringValue
	case *structpb.Value_NumberValue:
		return strconv.FormatFloat(v.NumberValue, 'f', -1, 64)
	}
	return ""
}

// addressScope is the client address's scope (clientIP).
func addressScope(in callerInput, hops int) string {
	return tagged(scopeAddress, clientIP(in, hops))
}

// clientIP is the client address: Envoy's peer with hops 0, else the
// hops-th address from the right of x-forwarded-for (the entries to its
// right were appended by trusted proxies). A shorter or unparsable list
// falls back to the peer: what a client wrote itself is never trusted.
// "" when there is no IP address (no peer, a Unix socket).
func clientIP(in callerInput, hops int) string {
	if hops > 0 {
		var xff []string
		for _, v := range in.headers.values("x-forwarded-for") {
			xff = append(xff, strings.Split(v, ",")...)
		}
		if len(xff) >= hops {
			if ip := parseIP(xff[len(xff)-hops]); ip != "" {
				return ip
			}
		}
	}
	return parseIP(in.address)
}

// parseIP returns the canonical form of an address ("ip" or "ip:port"),
// or "" when it is not an IP address.
func parseIP(s string) string {
	s = strings.TrimSpace(s)
	if host, _, err := net.SplitHostPort(s); err == nil {
		s = host
	}
	ip := net.ParseIP(strings.Trim(s, "[]"))
	if ip == nil {
		return ""
	}
	return ip.String()
}

// callerScope is the identity chain on an ext_proc stream: the principal
// and address come from the request_attributes Envoy sends
// (source.principal, source.address); there are no context extensions or
// metadata_context.
func (st *procStream) callerScope(hs headerList) string {
	in := callerInput{headers: hs, principal: st.attrs["source.principal"].GetStringValue(),
		address: st.attrs["source.address"].GetStringValue()}
	return callerScope(st.pol.Identity, in)
}
