package authz

import (
	"strings"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/policy"
)

// httpPolicy returns p's HTTP section, nil-safe.
func httpPolicy(p *policy.Policy) *policy.HTTP {
	if p == nil {
		return nil
	}
	return p.HTTP
}

// checkRequest is what Check reads of a CheckRequest.
type checkRequest struct {
	idemRequest
	principal  string
	extensions map[string]string
}

// headerPartialBody is set by Envoy when it cut the body at max_request_bytes
// (allow_partial_message).
const headerPartialBody = "x-envoy-auth-partial-body"

func newCheckRequest(req *authv3.CheckRequest) checkRequest {
	a := req.GetAttributes()
	hr := a.GetRequest().GetHttp()
	r := checkRequest{
		principal:  a.GetSource().GetPrincipal(),
		extensions: a.GetContextExtensions(),
	}
	r.method, r.path = hr.GetMethod(), hr.GetPath()
	r.headers = checkHeaders(hr)
	// raw_body with pack_as_bytes (binary-safe); body otherwise.
	if r.body = hr.GetRawBody(); len(r.body) == 0 && hr.GetBody() != "" {
		r.body = []byte(hr.GetBody())
	}
	if v, _ := r.headers.get(headerPartialBody); v == "true" {
		r.partialBody = true
	}
	return r
}

// checkHeaders reads the request headers: header_map (encode_raw_headers,
// repeated fields kept) when Envoy sent it, else the headers map.
func checkHeaders(hr *authv3.AttributeContext_HttpRequest) headerList {
	hm := hr.GetHeaderMap().GetHeaders()
	if len(hm) == 0 {
		return headersFromMap(hr.GetHeaders())
	}
	out := make(headerList, 0, len(hm))
	for _, h := range hm {
		v := h.GetValue()
		if len(h.GetRawValue()) > 0 {
			v = string(h.GetRawValue())
		}
		out = append(out, idempotency.Header{Name: strings.ToLower(h.GetKey()), Value: v})
	}
	return out
}
