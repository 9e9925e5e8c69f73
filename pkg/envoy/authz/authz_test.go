package authz

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/idempotency/memstore"
	"github.com/extauthz/extauthz/pkg/policy"
)

// checkReq builds a CheckRequest as Envoy sends it with pack_as_bytes.
func checkReq(method, path string, body []byte, kv ...string) *authv3.CheckRequest {
	h := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		h[kv[i]] = kv[i+1]
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
		Http: &authv3.AttributeContext_HttpRequest{Method: method, Path: path, Headers: h, RawBody: body}}}}
}

func (e *idemEnv) check(t *testing.T, req *authv3.CheckRequest) *authv3.CheckResponse {
	t.Helper()
	resp, err := e.authz.Check(context.Background(), req)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	return resp
}

// post is an idempotent POST through ext_authz.
func (e *idemEnv) post(t *testing.T, path, tenant, key string, body []byte, extra ...string) *authv3.CheckResponse {
	t.Helper()
	kv := append([]string{"x-tenant-id", tenant, "content-type", "application/json"}, extra...)
	if key != "" {
		kv = append(kv, "idempotency-key", key)
	}
	return e.check(t, checkReq("POST", path, body, kv...))
}

func deniedHeader(resp *authv3.CheckResponse, name string) []string {
	var out []string
	for _, h := range resp.GetDeniedResponse().GetHeaders() {
		if h.GetHeader().GetKey() == name {
			out = append(out, h.GetHeader().GetValue())
		}
	}
	return out
}

func wantDenied(t *testing.T, resp *authv3.CheckResponse, status int, problemType string) {
	t.Helper()
	d := resp.GetDeniedResponse()
	if d == nil || resp.GetStatus().GetCode() == int32(codes.OK) {
		t.Fatalf("admitted, want %d %s", status, problemType)
	}
	if int(d.GetStatus().GetCode()) != status {
		t.Fatalf("denied with %d (%s), want %d", d.GetStatus().GetCode(), d.GetBody(), status)
	}
	if problemType == "" {
		return
	}
	if ct := deniedHeader(resp, "content-type"); len(ct) != 1 || ct[0] != ContentTypeProblem {
		t.Errorf("content-type %v, want %s", ct, ContentTypeProblem)
	}
	var p Problem
	if err := json.Unmarshal([]byte(d.GetBody()), &p); err != nil || p.Type != problemType || p.Status != status {
		t.Errorf("problem %s (%v), want type %s", d.GetBody(), err, problemType)
	}
}

// wantLease checks an OK response carrying a lease handoff and returns the
// metadata as ext_proc would receive it.
func wantLease(t *testing.T, resp *authv3.CheckResponse, action string) *corev3.Metadata {
	t.Helper()
	if resp.GetOkResponse() == nil || resp.GetStatus().GetCode() != int32(codes.OK) {
		t.Fatalf("denied %d %s, want OK", resp.GetDeniedResponse().GetStatus().GetCode(), resp.GetDeniedResponse().GetBody())
	}
	md := resp.GetDynamicMetadata().GetFields()[envoy.MetadataField].GetStructValue()
	if got := md.GetFields()[envoy.MetadataAction].GetStringValue(); got != action {
		t.Fatalf("metadata action %q, want %q (metadata %v)", got, action, md)
	}
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{envoy.ExtAuthzNamespace: resp.GetDynamicMetadata()}}
}

// Every request-side row of DESIGN §4 through ext_authz, and the exact
// shape of the lease handoff.
func TestAuthzIdempotencyRequestSide(t *testing.T) {
	e := startIdem(t, idemPolicy)
	wantDenied(t, e.post(t, "/orders/1", "acme", "", []byte("{}")), 400, ProblemKeyMissing)
	wantDenied(t, e.post(t, "/orders/1", "acme", "bad key", []byte("{}")), 400, ProblemKeyMalformed)

	resp := e.post(t, "/orders/1?x=1", "acme", "k", []byte(`{"a":1}`), "x-plan", "gold")
	md := wantLease(t, resp, envoy.ActionLease)
	f := md.GetFilterMetadata()[envoy.ExtAuthzNamespace].GetFields()[envoy.MetadataField].GetStructValue().GetFields()
	wantFP := idempotency.NewFingerprint("POST", "/orders/1?x=1", []byte(`{"a":1}`), []idempotency.Header{{Name: "x-plan", Value: "gold"}})
	for k, want := range map[string]any{
		mdScope: "acme", mdKey: "k", mdRoute: "orders", mdFingerprint: wantFP.String(),
		mdLeaseTTLms: 30000.0, mdRecordTTLms: 3600000.0,
	} {
		if got := f[k].AsInterface(); got != want {
			t.Errorf("metadata %s = %v, want %v", k, got, want)
		}
	}
	if len(f[mdToken].GetStringValue()) != 32 {
		t.Errorf("metadata token %q, want 32 hex digits", f[mdToken].GetStringValue())
	}

	resp = e.post(t, "/orders/1?x=1", "acme", "k", []byte(`{"a":1}`), "x-plan", "gold")
	wantDenied(t, resp, 409, ProblemInProgress)
	if ra := deniedHeader(resp, "retry-after"); len(ra) != 1 || ra[0] != "2" {
		t.Errorf("Retry-After %v, want [2] (no request of the route finished yet: the default)", ra)
	}
	wantDenied(t, e.post(t, "/orders/1?x=1", "acme", "k", []byte(`{"a":2}`), "x-plan", "gold"), 422, ProblemKeyReused)
	wantDenied(t, e.post(t, "/orders/1?x=2", "acme", "k", []byte(`{"a":1}`), "x-plan", "gold"), 422, ProblemKeyReused)
	// Methods the route's idempotency does not cover pass without a key.
	if r := e.check(t, checkReq("GET", "/orders/1", nil, "x-tenant-id", "acme")); r.GetOkResponse() == nil || r.GetDynamicMetadata() != nil {
		t.Errorf("GET: %v, want OK without metadata", r)
	}
}

// Wiring (b), whole lifecycle: ext_authz admits with the lease, ext_proc
// stores the upstream's reply, ext_authz replays it (text body).
func TestWiringBStoresAndReplays(t *testing.T) {
	e := startIdem(t, idemPolicy)
	md := wantLease(t, e.post(t, "/orders/1", "acme", "k", []byte("{}")), envoy.ActionLease)
	s := e.open(t)
	r := s.send(reqHeaders(filterv3.ProcessingMode_NONE, false, md, ":method", "POST", ":path", "/orders/1"))
	if r.GetRequestHeaders() == nil {
		t.Fatalf("request headers with a lease answered %v", r)
	}
	s.upstream(201, []byte(`{"id":9}`), viaUpstream, 0, "content-type", "application/json", "set-cookie", "s=1", "location", "/orders/9")

	resp := e.post(t, "/orders/1", "acme", "k", []byte("{}"))
	wantDenied(t, resp, 201, "")
	if body := resp.GetDeniedResponse().GetBody(); body != `{"id":9}` {
		t.Errorf("replayed body %q", body)
	}
	for name, want := range map[string]string{"content-type": "application/json", "location": "/orders/9", HeaderIdempotentReplayed: "true", "set-cookie": ""} {
		got := deniedHeader(resp, name)
		if (want == "" && len(got) != 0) || (want != "" && (len(got) != 1 || got[0] != want)) {
			t.Errorf("replayed %s = %v, want %q", name, got, want)
		}
	}
	// That replay is a local reply: ext_proc's stream for it starts at the
	// response headers, without a lease, and stores nothing.
	stored := e.event(apiExtProc, idempotency.EventStored)
	s = e.open(t)
	s.upstream(201, []byte(`{"id":9}`), "ext_authz_denied", flag("UAEX"), HeaderIdempotentReplayed, "true")
	if e.event(apiExtProc, idempotency.EventStored) != stored {
		t.Error("ext_proc stored ext_authz's replay")
	}
	if e.event(envoy.APIExtAuthz, idempotency.EventReplayed) != 1 {
		t.Error("replayed not counted")
	}
}

// Wiring (b): an upstream 500 releases the lease; the retry takes a new one.
func TestWiringBUpstreamFailureReleases(t *testing.T) {
	e := startIdem(t, idemPolicy)
	md := wantLease(t, e.post(t, "/orders/1", "acme", "k", []byte("{}")), envoy.ActionLease)
	s := e.open(t)
	s.send(reqHeaders(filterv3.ProcessingMode_NONE, false, md, ":method", "POST", ":path", "/orders/1"))
	s.upstream(500, []byte("boom"), viaUpstream, 0)
	wantLease(t, e.post(t, "/orders/1", "acme", "k", []byte("{}")), envoy.ActionLease)
}

// Wiring (b) with a binary stored body: ext_authz cannot send it (proto
// string), so it admits without a lease and ext_proc replays the bytes on
// the request headers, before any upstream call.
func TestWiringBBinaryReplayGoesThroughExtProc(t *testing.T) {
	e := startIdem(t, idemPolicy)
	bin := []byte{0xff, 0x00, 0xfe, 'b', 'i', 'n'}
	md := wantLease(t, e.post(t, "/orders/1", "acme", "k", []byte("{}")), envoy.ActionLease)
	s := e.open(t)
	s.send(reqHeaders(filterv3.ProcessingMode_NONE, false, md, ":method", "POST", ":path", "/orders/1"))
	s.upstream(200, bin, viaUpstream, 0, "content-type", "application/octet-stream")

	md = wantLease(t, e.post(t, "/orders/1", "acme", "k", []byte("{}")), envoy.ActionReplay)
	if tok := md.GetFilterMetadata()[envoy.ExtAuthzNamespace].GetFields()[envoy.MetadataField].GetStructValue().GetFields()[mdToken]; tok != nil {
		t.Errorf("a replay handoff carries a token: %v", tok)
	}
	s = e.open(t)
	r := s.send(reqHeaders(filterv3.ProcessingMode_NONE, false, md, ":method", "POST", ":path", "/orders/1"))
	wantReplayIR(t, immediateOf(r), 200, bin)
	if ct := irHeader(immediateOf(r), "content-type"); len(ct) != 1 || ct[0] != "application/octet-stream" {
		t.Errorf("content-type %v", ct)
	}
}

// HTTP rate limits: per tenant, before idempotency, with the IETF headers;
// exempt requests are not counted.
func TestAuthzRateLimits(t *testing.T) {
	e := startIdem(t, idemPolicy)
	for i := range 2 {
		resp := e.post(t, "/limited", "acme", "k"+string(rune('0'+i)), []byte("{}"))
		wantLease(t, resp, envoy.ActionLease)
		var names []string
		for _, h := range resp.GetOkResponse().GetResponseHeadersToAdd() {
			names = append(names, h.GetHeader().GetKey()+": "+h.GetHeader().GetValue())
		}
		if len(names) != 2 || !strings.HasPrefix(names[0], `ratelimit-policy: "per-tenant";q=2;w=60`) {
			t.Errorf("request %d: response headers %v", i, names)
		}
	}
	// Over the limit: 429, before the missing key would give 400.
	resp := e.post(t, "/limited", "acme", "", []byte("{}"))
	wantDenied(t, resp, 429, ProblemQuotaExceeded)
	if got := deniedHeader(resp, "ratelimit"); len(got) != 1 || !strings.HasPrefix(got[0], `"per-tenant";r=0;t=`) {
		t.Errorf("RateLimit %v", got)
	}
	if got := deniedHeader(resp, "retry-after"); len(got) != 1 || got[0] != "30" {
		t.Errorf("Retry-After %v, want [30] (GCRA: one emission interval)", got)
	}
	var p Problem
	_ = json.Unmarshal([]byte(resp.GetDeniedResponse().GetBody()), &p)
	if len(p.ViolatedPolicies) != 1 || p.ViolatedPolicies[0] != "per-tenant" {
		t.Errorf("violated-policies %v", p.ViolatedPolicies)
	}
	wantLease(t, e.post(t, "/limited", "other", "k", []byte("{}")), envoy.ActionLease) // another tenant's budget
	calls := len(e.limits.Calls())
	wantLease(t, e.post(t, "/limited", "acme", "k9", []byte("{}"), "x-internal", "yes"), envoy.ActionLease)
	wantDenied(t, e.post(t, "/limited/health", "acme", "", nil), 400, ProblemKeyMissing) // exempt from limits only
	if len(e.limits.Calls()) != calls {
		t.Error("exempt requests were counted")
	}
	e.limits.SetErr(errStoreDown)
	if _, err := e.authz.Check(context.Background(), checkReq("POST", "/limited", nil, "x-tenant-id", "z")); status.Code(err) != codes.Unavailable {
		t.Errorf("rate-limit store down: %v, want Unavailable", err)
	}
}

// Every class of rate-limit store failure through ext_authz, mapped as RLS
// maps them: the caller's own end as such, anything else Unavailable.
func TestAuthzStoreErrorClasses(t *testing.T) {
	t.Parallel()
	p := envoytest.WritePolicy(t, idemPolicy)
	m, err := envoy.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	events, err := NewIdempotencyMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	req := checkReq("POST", "/limited", []byte("{}"), "x-tenant-id", "acme", "idempotency-key", `"k"`)
	for _, c := range envoytest.StoreErrorCases {
		az, err := NewAuthz(envoytest.FailingStore{Err: c.Err}, memstore.New(memstore.Config{}), envoy.PolicyFunc(func() *policy.Policy { return p }), m, events)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := c.Ctx()
		_, err = az.Check(ctx, req)
		cancel()
		if status.Code(err) != c.Want {
			t.Errorf("%s: %v, want %v", c.Name, err, c.Want)
		}
	}
}

// The tenant comes from the header, else the mTLS principal, else the
// route's context extension (the legacy tenant section mapped onto the
// identity chain); it scopes keys, each source under its own tag. Without
// any, a keyed request is 401: the old default is no longer a shared scope.
func TestAuthzTenantSources(t *testing.T) {
	e := startIdem(t, idemPolicy)
	scopeOf := func(req *authv3.CheckRequest) string {
		md := wantLease(t, e.check(t, req), envoy.ActionLease)
		return md.GetFilterMetadata()[envoy.ExtAuthzNamespace].GetFields()[envoy.MetadataField].GetStructValue().GetFields()[mdScope].GetStringValue()
	}
	withPeer := func(r *authv3.CheckRequest, principal string, ext map[string]string) *authv3.CheckRequest {
		r.Attributes.Source = &authv3.AttributeContext_Peer{Principal: principal}
		r.Attributes.ContextExtensions = ext
		return r
	}
	spiffe := "spiffe://cluster.local/ns/a/sa/b"
	tests := []struct {
		req  *authv3.CheckRequest
		want string
	}{
		{withPeer(checkReq("POST", "/orders/1", nil, "idempotency-key", "k1", "x-tenant-id", "hdr"), spiffe, map[string]string{"tenant": "ext"}), "hdr"},
		{withPeer(checkReq("POST", "/orders/1", nil, "idempotency-key", "k2"), spiffe, map[string]string{"tenant": "ext"}), "~p~" + spiffe},
		{withPeer(checkReq("POST", "/orders/1", nil, "idempotency-key", "k3"), "", map[string]string{"tenant": "ext"}), "~x~ext"},
		{checkReq("POST", "/orders/1", nil, "idempotency-key", "k4", "x-tenant-id", "~p~"+spiffe), "~t~~p~" + spiffe},
	}
	for _, tc := range tests {
		if got := scopeOf(tc.req); got != tc.want {
			t.Errorf("tenant %q, want %q", got, tc.want)
		}
	}
	wantDenied(t, e.check(t, checkReq("POST", "/orders/1", nil, "idempotency-key", "k5")), 401, ProblemIdentityMissing)
}

// Edge cases: a partial body cannot be fingerprinted (413); a body sent as
// a string fingerprints like the same bytes sent raw; no route is OK.
func TestAuthzBodiesAndRoutes(t *testing.T) {
	e := startIdem(t, idemPolicy)
	wantDenied(t, e.post(t, "/orders/1", "acme", "p", []byte("{"), "x-envoy-auth-partial-body", "true"), 413, ProblemBodyTooLarge)
	wantLease(t, e.post(t, "/orders/1", "acme", "s", []byte(`{"a":1}`)), envoy.ActionLease)
	req := checkReq("POST", "/orders/1", nil, "x-tenant-id", "acme", "idempotency-key", "s")
	req.Attributes.Request.Http.Body = `{"a":1}`
	wantDenied(t, e.check(t, req), 409, ProblemInProgress) // same fingerprint: in flight, not 422
	if r := e.check(t, checkReq("POST", "/elsewhere", nil)); r.GetOkResponse() == nil || r.GetDynamicMetadata() != nil {
		t.Errorf("unmatched path: %v", r)
	}
	for _, req := range []*authv3.CheckRequest{{}, checkReq("", "/orders/1", nil), checkReq("POST", "", nil)} {
		r, err := e.authz.Check(context.Background(), req)
		if err != nil {
			t.Fatalf("CheckRequest without method or path: %v, want a decision", err)
		}
		wantDenied(t, r, 400, ProblemRequestMalformed)
	}
}

// Store down through ext_authz: fail-open admits without a lease, a
// fail-closed route answers 503.
func TestAuthzStoreDown(t *testing.T) {
	e := startIdem(t, idemPolicy)
	e.store.fail.Store(true)
	if r := e.post(t, "/orders/1", "acme", "k", nil); r.GetOkResponse() == nil || r.GetDynamicMetadata() != nil {
		t.Errorf("fail-open: %v, want OK without a lease", r)
	}
	resp := e.post(t, "/strict", "acme", "k", nil)
	wantDenied(t, resp, 503, ProblemUnavailable)
	if got := deniedHeader(resp, "retry-after"); len(got) != 1 {
		t.Errorf("503 without Retry-After")
	}
}

// A store that stops answering is cut off by the store timeout, so the
// route's failure mode answers, not Envoy's timeout.
func TestAuthzStoreHangs(t *testing.T) {
	e := startIdem(t, idemPolicy)
	e.store.hang.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := e.authz.Check(ctx, checkReq("POST", "/orders/1", nil, "x-tenant-id", "a", "idempotency-key", "k"))
	if err != nil || resp.GetOkResponse() == nil {
		t.Fatalf("fail-open route with a hung store: %v %v, want OK", resp, err)
	}
	resp, err = e.authz.Check(ctx, checkReq("POST", "/strict", nil, "x-tenant-id", "a", "idempotency-key", "k"))
	if err != nil {
		t.Fatal(err)
	}
	wantDenied(t, resp, 503, ProblemUnavailable)
}

func TestNewServersRejectNilDependencies(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := envoy.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := NewIdempotencyMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	store := memstore.New(memstore.Config{})
	limits := envoytest.NewTestStore(t, time.Now)
	src := envoy.PolicyFunc(func() *policy.Policy { return nil })
	var nilStore *memstore.Store
	for name, err := range map[string]error{
		"authz limits":   second(NewAuthz(nil, store, src, m, ev)),
		"authz store":    second(NewAuthz(limits, nilStore, src, m, ev)),
		"authz policies": second(NewAuthz(limits, store, nil, m, ev)),
		"authz metrics":  second(NewAuthz(limits, store, src, nil, ev)),
		"authz events":   second(NewAuthz(limits, store, src, m, nil)),
		"proc store":     second(NewExtProc(nil, src, m, ev)),
		"proc policies":  second(NewExtProc(store, nil, m, ev)),
		"proc events":    second(NewExtProc(store, src, m, nil)),
	} {
		if err == nil {
			t.Errorf("%s: nil dependency accepted", name)
		}
	}
	// With no policy loaded everything is admitted untouched.
	az, _ := NewAuthz(limits, store, src, m, ev)
	if r, err := az.Check(context.Background(), checkReq("POST", "/orders", nil, "idempotency-key", "k")); err != nil || r.GetOkResponse() == nil {
		t.Errorf("no policy: %v %v", r, err)
	}
}

func second[T any](_ T, err error) error { return err }
