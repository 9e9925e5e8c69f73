package admin

import (
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// ExplainRequest is the body of POST /v1/explain: one of RateLimit (a
// ShouldRateLimit call) or HTTP (an ext_authz Check).
type ExplainRequest struct {
	RateLimit *RateLimitCall `json:"ratelimit,omitempty"`
	HTTP      *HTTPCall      `json:"http,omitempty"`
}

// RateLimitCall is a ShouldRateLimit request.
type RateLimitCall struct {
	Domain string `json:"domain"`
	// Descriptors are lists of entries, each {"key": ..., "value": ...}.
	Descriptors [][]Entry `json:"descriptors"`
	HitsAddend  uint32    `json:"hits_addend,omitempty"`
}

// Entry is one descriptor entry.
type Entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// HTTPCall is the part of an ext_authz Check the decision reads.
type HTTPCall struct {
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	Host    string            `json:"host,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	// SourceAddress is the client as Envoy sees its peer: "ip" or "ip:port".
	SourceAddress string `json:"source_address,omitempty"`
	// Principal is the mTLS peer principal (a SPIFFE ID in a mesh).
	Principal string `json:"principal,omitempty"`
}

// HTTPExplanation answers POST /v1/explain for an HTTP request.
type HTTPExplanation struct {
	// Route is the matched route; empty when none matched (admitted).
	Route string `json:"route"`
	// Identity is the caller's scope; IdentitySource the identity chain
	// entry that named it (empty: none did, limits fall back to the
	// client address).
	Identity       string       `json:"identity"`
	IdentitySource string       `json:"identity_source,omitempty"`
	Exempt         bool         `json:"exempt,omitempty"`
	Counter        string       `json:"counter,omitempty"`
	Limits         []LimitState `json:"limits,omitempty"`
	// WouldAnswer is "admit" or "429" (the rate limits only; an
	// Idempotency-Key decision would take a lease, so it is not made).
	WouldAnswer string `json:"would_answer"`
	// RecordScope is the scope of the caller's Idempotency-Key records on
	// this route (for /v1/idempotency/record: identity and route).
	RecordScope string `json:"idempotency_record_scope,omitempty"`
}

// explain answers POST /v1/explain.
func (a *API) explain(r *http.Request) (any, []string, error) {
	var in ExplainRequest
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return nil, nil, badRequest("body: %v", err)
	}
	switch {
	case (in.RateLimit == nil) == (in.HTTP == nil):
		return nil, nil, badRequest(`send exactly one of "ratelimit" and "http"`)
	case in.RateLimit != nil:
		req, err := in.RateLimit.proto()
		if err != nil {
			return nil, nil, err
		}
		st, keys, _, err := a.rateLimitState(r, req)
		return st, keys, err
	}
	return a.explainHTTP(r, in.HTTP)
}

func (c *RateLimitCall) proto() (*rlsv3.RateLimitRequest, error) {
	if c.Domain == "" || len(c.Descriptors) == 0 {
		return nil, badRequest("ratelimit: domain and descriptors are required")
	}
	req := &rlsv3.RateLimitRequest{Domain: c.Domain, HitsAddend: c.HitsAddend}
	for _, es := range c.Descriptors {
		d := &commonrlv3.RateLimitDescriptor{}
		for _, e := range es {
			d.Entries = append(d.Entries, &commonrlv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	return req, nil
}

func (a *API) explainHTTP(r *http.Request, c *HTTPCall) (any, []string, error) {
	if c.Method == "" || c.Path == "" {
		return nil, nil, badRequest("http: method and path are required")
	}
	ex, err := a.o.HTTP.Explain(r.Context(), c.proto())
	if err != nil {
		return nil, nil, err
	}
	out := HTTPExplanation{Identity: ex.Identity, IdentitySource: string(ex.Source), Exempt: ex.Exempt,
		WouldAnswer: "admit", RecordScope: ex.RecordScope}
	if ex.Route == nil {
		return out, nil, nil
	}
	out.Route = ex.Route.Name
	if !ex.Allowed {
		out.WouldAnswer = "429"
	}
	var keys []string
	if ex.Request != nil {
		out.Counter = ex.Request.Key
		out.Limits = a.limitStates(*ex.Request, ex.Names, ex.Results)
		for _, l := range out.Limits {
			keys = append(keys, l.Key)
		}
	}
	return out, keys, nil
}

// proto builds the CheckRequest Envoy would send (headers lower-cased, as
// HTTP/2 and Envoy's header map have them).
func (c *HTTPCall) proto() *authv3.CheckRequest {
	hs := make(map[string]string, len(c.Headers))
	for k, v := range c.Headers {
		hs[strings.ToLower(k)] = v
	}
	if c.Host != "" {
		hs[":authority"] = c.Host
	}
	src := &authv3.AttributeContext_Peer{Principal: c.Principal}
	if c.SourceAddress != "" {
		host, port, err := net.SplitHostPort(c.SourceAddress)
		if err != nil {
			host, port = c.SourceAddress, "0"
		}
		p, _ := strconv.ParseUint(port, 10, 32)
		src.Address = &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: strings.Trim(host, "[]"), PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(p)}}}}
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Source: src, Request: &authv3.AttributeContext_Request{
		Http: &authv3.AttributeContext_HttpRequest{Method: c.Method, Path: c.Path, Host: c.Host, Headers: hs}}}}
}
