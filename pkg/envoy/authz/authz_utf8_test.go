package authz

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/extauthz/extauthz/pkg/envoy"
)

// rawCheckReq builds a CheckRequest as Envoy sends it with
// encode_raw_headers: header_map with raw_value bytes, any octets.
func rawCheckReq(method, path string, body []byte, kv ...string) *authv3.CheckRequest {
	hm := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
		Http: &authv3.AttributeContext_HttpRequest{Method: method, Path: path, HeaderMap: hm, RawBody: body}}}}
}

// A tenant header holding obs-text (not UTF-8, possible with
// encode_raw_headers) must survive the handoff to ext_proc byte for byte:
// dynamic_metadata is a Struct of proto strings, which gRPC refuses to
// marshal with invalid UTF-8 (the Check failed after taking the lease).
func TestWiringBTenantNotUTF8(t *testing.T) {
	e := startIdem(t, idemPolicy)
	post := func(tenant string) *authv3.CheckResponse {
		return e.check(t, rawCheckReq("POST", "/orders/1", []byte("{}"), "x-tenant-id", tenant, "idempotency-key", "k"))
	}
	md := wantLease(t, post("caf\xe9"), envoy.ActionLease)
	h, ok, err := handoffFrom(md)
	if !ok || err != nil || h.lease.Scope != "caf\xe9" {
		t.Fatalf("handoff scope %q (ok %v, err %v), want %q", h.lease.Scope, ok, err, "caf\xe9")
	}
	s := e.open(t)
	s.send(reqHeaders(filterv3.ProcessingMode_NONE, false, md, ":method", "POST", ":path", "/orders/1"))
	s.upstream(201, []byte(`{"id":1}`), viaUpstream, 0)

	resp := post("caf\xe9")
	wantDenied(t, resp, 201, "")
	// Other tenants, including the one Envoy's headers map would show for
	// the same bytes, do not share the key.
	wantLease(t, post("caf\xea"), envoy.ActionLease)
	wantLease(t, post("caf!"), envoy.ActionLease)
}
