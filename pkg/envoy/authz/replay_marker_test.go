package authz

import (
	"encoding/json"
	"strings"
	"testing"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"

	"github.com/extauthz/extauthz/pkg/envoy"
)

// markerPolicy has a route whose replays also carry X-Cache-Lookup, one
// whose replays carry only Idempotent-Replayed, and a webhook receiver
// whose senders put the key in webhook-id.
const markerPolicy = `
http:
  tenant: {header: x-tenant-id, principal: true, context_extension: tenant, default: public}
  routes:
    - name: orders
      path_prefix: /orders
      idempotency: {key_required: true, x_cache_lookup: true, replay_headers: [content-type, location]}
    - name: plain
      path_prefix: /plain
      idempotency: {key_required: true}
    - name: hooks
      path_prefix: /hooks
      idempotency: {key_required: true, key_header: webhook-id, x_cache_lookup: true}
`

// wantMarkers checks a replay's marker headers, got by name: always
// Idempotent-Replayed: true; X-Cache-Lookup: HIT-IDEMPOTENT exactly when
// the route asks (never the first response's own X-Cache-Lookup).
func wantMarkers(t *testing.T, header func(string) []string, cacheLookup bool) {
	t.Helper()
	if v := header(HeaderIdempotentReplayed); len(v) != 1 || v[0] != "true" {
		t.Errorf("Idempotent-Replayed %v, want [true]", v)
	}
	var want []string
	if cacheLookup {
		want = []string{CacheLookupReplay}
	}
	if v := header(HeaderCacheLookup); strings.Join(v, ",") != strings.Join(want, ",") {
		t.Errorf("X-Cache-Lookup %v, want %v", v, want)
	}
}

// Wiring (b): ext_authz takes the lease, ext_proc stores the reply (which
// carries the upstream cache's own X-Cache-Lookup: MISS), ext_authz
// replays it with the route's markers.
func TestReplayMarkersThroughExtAuthz(t *testing.T) {
	for _, c := range []struct {
		path        string
		cacheLookup bool
	}{{"/orders/1", true}, {"/plain/1", false}} {
		t.Run(c.path, func(t *testing.T) {
			e := startIdem(t, markerPolicy)
			md := wantLease(t, e.post(t, c.path, "acme", "k", []byte("{}")), envoy.ActionLease)
			s := e.open(t)
			s.send(reqHeaders(filterv3.ProcessingMode_NONE, false, md, ":method", "POST", ":path", c.path))
			s.upstream(201, []byte(`{"id":9}`), viaUpstream, 0, "content-type", "application/json", "x-cache-lookup", "MISS from cache")

			resp := e.post(t, c.path, "acme", "k", []byte("{}"))
			wantDenied(t, resp, 201, "")
			wantMarkers(t, func(name string) []string { return deniedHeader(resp, name) }, c.cacheLookup)
		})
	}
}

// ext_proc alone: the replay's ImmediateResponse carries the route's markers.
func TestReplayMarkersThroughExtProc(t *testing.T) {
	for _, c := range []struct {
		path        string
		cacheLookup bool
	}{{"/orders/1", true}, {"/plain/1", false}} {
		t.Run(c.path, func(t *testing.T) {
			e := startIdem(t, markerPolicy)
			s, ir := e.postA(t, c.path, "acme", "k", []byte("{}"))
			if ir != nil {
				t.Fatalf("first request answered %d, want it to go upstream", ir.GetStatus().GetCode())
			}
			s.upstream(201, []byte(`{"id":7}`), viaUpstream, 0, "content-type", "application/json", "x-cache-lookup", "MISS from cache")
			_, ir = e.postA(t, c.path, "acme", "k", []byte("{}"))
			wantReplayIR(t, ir, 201, []byte(`{"id":7}`))
			wantMarkers(t, func(name string) []string { return irHeader(ir, name) }, c.cacheLookup)
		})
	}
}

// A body in object storage: the endpoint's replay carries the markers too.
func TestReplayMarkersFromObjectStorage(t *testing.T) {
	e := startReplayPolicy(t, markerPolicy, true)
	e.storeLarge(t, "/orders/1", "k1", []byte("{}"), []byte("stored"))
	r, got, err := e.fetch(t, markOf(t, e.post(t, "/orders/1", "acme", "k1", []byte("{}"))), "k1")
	if err != nil || r.StatusCode != 201 || string(got) != "stored" {
		t.Fatalf("replay = %v %v %q", r, err, got)
	}
	wantMarkers(t, func(name string) []string { return r.Header.Values(name) }, true)
}

// key_header: webhook-id: the key is read from webhook-id, through
// ext_authz and ext_proc; Idempotency-Key means nothing on that route.
func TestKeyHeaderPerRoute(t *testing.T) {
	e := startIdem(t, markerPolicy)
	resp := e.post(t, "/hooks/in", "acme", "k-in-idempotency-key", []byte("{}"))
	wantDenied(t, resp, 400, ProblemKeyMissing)
	var p Problem
	if err := json.Unmarshal([]byte(resp.GetDeniedResponse().GetBody()), &p); err != nil || !strings.Contains(p.Detail, "webhook-id") {
		t.Errorf("problem %+v (%v), want its detail to name webhook-id", p, err)
	}
	wantDenied(t, e.post(t, "/hooks/in", "acme", "", []byte("{}"), "webhook-id", "two words"), 400, ProblemKeyMalformed)

	md := wantLease(t, e.post(t, "/hooks/in", "acme", "", []byte("{}"), "webhook-id", "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"), envoy.ActionLease)
	f := md.GetFilterMetadata()[envoy.ExtAuthzNamespace].GetFields()[envoy.MetadataField].GetStructValue().GetFields()
	if got := f[mdKey].GetStringValue(); got != "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W" {
		t.Errorf("lease key %q, want webhook-id's value", got)
	}
	s := e.open(t)
	s.send(reqHeaders(filterv3.ProcessingMode_NONE, false, md, ":method", "POST", ":path", "/hooks/in"))
	s.upstream(204, nil, viaUpstream, 0)
	// The sender's retry is replayed, whichever filter sees it first.
	wantDenied(t, e.post(t, "/hooks/in", "acme", "", []byte("{}"), "webhook-id", "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"), 204, "")
	_, ir := e.postA(t, "/hooks/in", "acme", "", []byte("{}"), "webhook-id", "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W")
	wantReplayIR(t, ir, 204, nil)
	wantMarkers(t, func(name string) []string { return irHeader(ir, name) }, true)

	// ext_proc sees repeated fields (ext_authz gets them joined): refused.
	_, ir = e.postA(t, "/hooks/in", "acme", "", []byte("{}"), "webhook-id", "a", "webhook-id", "b")
	wantProblemIR(t, ir, 400, ProblemKeyMalformed)
}

// An object-storage replay on a key_header route checks the key in that
// header: the ticket names it.
func TestKeyHeaderReplayFromObjectStorage(t *testing.T) {
	e := startReplayPolicy(t, markerPolicy, true)
	e.storeLarge(t, "/hooks/in", "msg_1", []byte("{}"), []byte("stored"))
	mark := markOf(t, e.post(t, "/hooks/in", "acme", "", []byte("{}"), "webhook-id", "msg_1"))
	if r, _, err := e.fetch(t, mark, "msg_1"); err != nil || r.StatusCode != 403 {
		t.Fatalf("replay with the key in Idempotency-Key only = %v %v, want 403", r, err)
	}
	r, got, err := e.fetchWith(t, mark, "", "webhook-id", "msg_1")
	if err != nil || r.StatusCode != 201 || string(got) != "stored" {
		t.Fatalf("replay = %v %v %q, want 201 stored", r, err, got)
	}
}
