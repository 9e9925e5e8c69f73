package admin

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/authz"
	"github.com/extauthz/extauthz/pkg/envoy/rls"
	"github.com/extauthz/extauthz/pkg/idempotency"
	idemmem "github.com/extauthz/extauthz/pkg/idempotency/memstore"
	"github.com/extauthz/extauthz/pkg/policy"
	inflightmem "github.com/extauthz/extauthz/pkg/ratelimit/inflight/memstore"
	"github.com/extauthz/extauthz/pkg/ratelimit/lockout"
	lockoutmem "github.com/extauthz/extauthz/pkg/ratelimit/lockout/memstore"
	"github.com/extauthz/extauthz/pkg/ratelimit/memstore"
)

const testPolicy = `
domain: edge
descriptors:
  - key: route
    value: orders
    rate_limit: {name: orders, unit: minute, requests_per_unit: 3}
  - key: route
    value: free
    rate_limit: {unlimited: true}
http:
  identity:
    sources: [{tenant_header: x-tenant-id}]
  routes:
    - name: orders
      path_prefix: /orders
      rate_limits: [{requests_per_unit: 2, unit: minute, name: per-tenant}]
      idempotency: {}
    - {name: reports, path_prefix: /reports, tier_limits: plans}
    - {name: llm, path_prefix: /llm, tier_limits: tokens}
    - {name: exports, path_prefix: /exports, max_in_flight: 2, in_flight_ttl: 9s}
    - name: login
      path_prefix: /login
      rate_limits:
        - name: per-address
          requests_per_unit: 3
          unit: hour
          algorithm: fixed_window
          charge: {on_status: [401, 4xx], key: {client_address: {}}, lockout: {initial: 1m, max: 4m}}
        - name: per-account
          requests_per_unit: 20
          unit: hour
          charge: {on_status: [401], key: {json_field: user.name}}
    - name: chat
      path_prefix: /chat
      rate_limits:
        - name: tokens
          requests_per_unit: 1000
          unit: minute
          charge: {cost: {json_field: usage.total_tokens, default: 50}, reserve: {header: x-max-tokens, default: 10}}
  tiers:
    plans:
      attribute: {header: x-plan}
      default: free
      limits:
        free: [{requests_per_unit: 1, unit: minute, name: reports-free}]
        pro: [{requests_per_unit: 5, unit: minute, name: reports-pro}]
    tokens:
      attribute: {header: x-plan}
      default: free
      limits:
        free: [{name: tokens-free, requests_per_unit: 100, unit: minute, charge: {cost: {header: x-usage, default: 10}}}]
`

// env is an API over the memory stores and the real RLS and ext_authz
// servers, with the audit trail it wrote.
type env struct {
	api     *API
	rls     *rls.RLS
	az      *authz.Authz
	slots   *inflightmem.Store
	locks   *lockoutmem.Store
	records *idemmem.Store
	reg     *prometheus.Registry
	audit   []Audit
	token   string
}

func newEnv(t *testing.T, token string) *env {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(testPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := policy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	src := envoy.PolicyFunc(func() *policy.Policy { return p })
	now := time.Unix(1_700_006_400, 0)
	limits, err := memstore.New(memstore.Options{Now: func() time.Time { return now }, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = limits.Close() })
	e := &env{records: idemmem.New(idemmem.Config{Now: func() time.Time { return now }}), reg: prometheus.NewRegistry(), token: token}
	m, err := envoy.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if e.rls, err = rls.NewRLS(limits, src, m); err != nil {
		t.Fatal(err)
	}
	events, err := authz.NewIdempotencyMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	e.slots = inflightmem.New(inflightmem.Config{Now: func() time.Time { return now }})
	e.locks = lockoutmem.New(lockoutmem.Config{Now: func() time.Time { return now }})
	charges := authz.WithCharges(limits, e.locks, nil)
	if e.az, err = authz.NewAuthz(limits, e.records, src, m, events, authz.WithInFlight(e.slots), charges); err != nil {
		t.Fatal(err)
	}
	e.api, err = New(Options{RLS: e.rls, HTTP: e.az, Limits: limits, Records: e.records, Policies: src,
		Token: token, Registerer: e.reg, Audit: func(a Audit) { e.audit = append(e.audit, a) }})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// do calls the API and decodes its JSON answer into out (when not nil).
func (e *env) do(t *testing.T, method, target, body string, wantStatus int, out any) {
	t.Helper()
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	req.Host = "127.0.0.1:9003" // the loopback listener
	if method != "GET" {
		req.Header.Set("Content-Type", "application/json")
	}
	if e.token != "" {
		req.Header.Set("Authorization", "Bearer "+e.token)
	}
	rec := httptest.NewRecorder()
	e.api.ServeHTTP(rec, req)
	if rec.Code != wantStatus {
		t.Fatalf("%s %s = %d %s, want %d", method, target, rec.Code, rec.Body, wantStatus)
	}
	if out != nil {
		if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, target, err, rec.Body)
		}
	}
}

func stateQuery(descs ...string) string {
	q := url.Values{"domain": {"edge"}, "descriptor": descs}
	return "/v1/ratelimit/state?" + q.Encode()
}

// TestStateResetRoundTrip: state reads without charging, a real decision
// shows in it, reset brings it back to full and names the keys.
func TestStateResetRoundTrip(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	q := stateQuery("tenant=acme,route=orders", "route=free", "route=nowhere")
	var st RateLimitState
	for range 2 {
		e.do(t, "GET", q, "", 200, &st)
	}
	d := st.Descriptors[0]
	if d.Rule != "orders" || d.Counter != "acme|edge|route=orders" || len(d.Limits) != 1 || d.Limits[0].Remaining != 3 ||
		d.Limits[0].Key == "" || d.Limits[0].Algorithm != "gcra" || st.WouldAnswer != "OK" {
		t.Fatalf("state = %+v", st)
	}
	if st.Descriptors[1].Outcome != "unlimited" || st.Descriptors[2].Outcome != "no_match" || len(st.Descriptors[2].Why) == 0 {
		t.Fatalf("uncounted descriptors = %+v", st.Descriptors[1:])
	}
	// A real decision through the RLS server (tests may speak Envoy's protos).
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonrlv3.RateLimitDescriptor{{Entries: []*commonrlv3.RateLimitDescriptor_Entry{
		{Key: "tenant", Value: "acme"}, {Key: "route", Value: "orders"}}}}}
	if _, err := e.rls.ShouldRateLimit(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	e.do(t, "GET", q, "", 200, &st)
	if got := st.Descriptors[0].Limits[0].Remaining; got != 2 {
		t.Fatalf("after one decision remaining = %d, want 2", got)
	}
	e.do(t, "POST", q, "", 405, nil)
	e.do(t, "GET", "/v1/nothing", "", 404, nil)
	e.do(t, "POST", "/v1/ratelimit/reset"+q[len("/v1/ratelimit/state"):], "", 200, &st)
	if len(st.Reset) != 1 || st.Reset[0] != d.Limits[0].Key || st.Descriptors[0].Limits[0].Remaining != 3 {
		t.Fatalf("reset = %+v", st)
	}
	last := e.audit[len(e.audit)-1]
	if last.Endpoint != "ratelimit_reset" || last.Status != 200 || len(last.Keys) != 1 || last.Keys[0] != d.Limits[0].Key {
		t.Fatalf("audit = %+v", last)
	}
	if n := counter(t, e.api.calls.WithLabelValues("ratelimit_state", "200")); n != 3 {
		t.Fatalf("state calls counted %v, want 3", n)
	}
}

// TestTokenIsRequired: without the token or with a wrong one, 401
// problem+json, audited as unauthenticated; with it, 200.
func TestTokenIsRequired(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "s3cret-token")
	for _, auth := range []string{"", "Bearer wrong", "Basic s3cret-token", "Bearer s3cret-token-longer"} {
		req := httptest.NewRequest("GET", stateQuery("route=free"), nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		rec := httptest.NewRecorder()
		e.api.ServeHTTP(rec, req)
		if rec.Code != 401 || rec.Header().Get("Content-Type") != authz.ContentTypeProblem || rec.Header().Get("WWW-Authenticate") == "" {
			t.Fatalf("%q: %d %v", auth, rec.Code, rec.Header())
		}
	}
	if a := e.audit[0]; a.Authenticated || a.Status != 401 {
		t.Fatalf("audit = %+v", a)
	}
	e.do(t, "GET", stateQuery("route=free"), "", 200, nil)
	if a := e.audit[len(e.audit)-1]; !a.Authenticated {
		t.Fatalf("audit = %+v", a)
	}
	if n := counter(t, e.api.calls.WithLabelValues("ratelimit_state", "401")); n != 4 {
		t.Fatalf("401s counted %v, want 4", n)
	}
}

// TestExplainHTTPAndRateLimit: both request kinds reach the servers' own
// planning; bad bodies are 400.
func TestExplainHTTPAndRateLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	var hx HTTPExplanation
	body := `{"http": {"method": "POST", "path": "/orders/1", "headers": {"X-Tenant-Id": "acme"}, "source_address": "10.0.0.7:5555"}}`
	e.do(t, "POST", "/v1/explain", body, 200, &hx)
	if hx.Route != "orders" || hx.Identity != "acme" || hx.IdentitySource != "tenant_header" || hx.WouldAnswer != "admit" ||
		len(hx.Limits) != 1 || hx.Limits[0].Remaining != 2 || hx.RecordScope != "acme" {
		t.Fatalf("http explain = %+v", hx)
	}
	for plan, want := range map[string]string{"pro": "pro", "platinum": "free"} {
		var tx HTTPExplanation
		e.do(t, "POST", "/v1/explain", `{"http": {"method": "GET", "path": "/reports", "headers": {"x-tenant-id": "acme", "x-plan": "`+plan+`"}}}`, 200, &tx)
		if tx.Tier != want || len(tx.Limits) != 1 || tx.Limits[0].Name != "reports-"+want {
			t.Errorf("explain with plan %q = %+v, want tier %q", plan, tx, want)
		}
	}
	var ix HTTPExplanation
	e.do(t, "POST", "/v1/explain", `{"http": {"method": "GET", "path": "/exports/1", "headers": {"x-tenant-id": "acme"}}}`, 200, &ix)
	if f := ix.InFlight; f == nil || f.Limit != 2 || f.Held != 0 || f.TTLSeconds != 9 || f.Key == "" || ix.WouldAnswer != "admit" {
		t.Fatalf("explain of a max_in_flight route = %+v %+v", ix, ix.InFlight)
	}
	for range 2 {
		if _, _, err := e.slots.Acquire(context.Background(), ix.InFlight.Key, 2, 9*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	e.do(t, "POST", "/v1/explain", `{"http": {"method": "GET", "path": "/exports/1", "headers": {"x-tenant-id": "acme"}}}`, 200, &ix)
	if f := ix.InFlight; f.Held != 2 || f.NextExpirySeconds != 9 || ix.WouldAnswer != "429" {
		t.Fatalf("explain with every slot held = %+v %+v", ix, ix.InFlight)
	}
	var st RateLimitState
	e.do(t, "POST", "/v1/explain", `{"ratelimit": {"domain": "edge", "descriptors": [[{"key": "tenant", "value": "a,b"}, {"key": "route", "value": "orders"}]]}}`, 200, &st)
	if st.Descriptors[0].Counter != "a,b|edge|route=orders" {
		t.Fatalf("ratelimit explain = %+v", st)
	}
	for _, bad := range []string{`{}`, `{"http": {"method": "GET"}}`, `{"ratelimit": {"domain": "edge"}}`, `{"bogus": 1}`, `not json`} {
		e.do(t, "POST", "/v1/explain", bad, 400, nil)
	}
	e.do(t, "GET", "/v1/ratelimit/state?domain=edge", "", 400, nil)
	e.do(t, "GET", "/v1/ratelimit/state?domain=edge&descriptor=novalue", "", 400, nil)
}

// TestExplainHTTPChargedLimits: explain shows a route's charged limits:
// what each counts or where its cost is read, whose key and the counting
// key when the request names it, the budget read without a charge, and
// the lockout with the key's time left, which decides would_answer.
func TestExplainHTTPChargedLimits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	body := `{"http": {"method": "POST", "path": "/login", "source_address": "198.51.100.7:5555"}}`
	var hx HTTPExplanation
	for range 2 { // twice: the first charged nothing
		e.do(t, "POST", "/v1/explain", body, 200, &hx)
	}
	if hx.Route != "login" || hx.WouldAnswer != "admit" || len(hx.Limits) != 0 || len(hx.Charged) != 2 {
		t.Fatalf("explain of a login = %+v", hx)
	}
	addr, account := hx.Charged[0], hx.Charged[1]
	if addr.Name != "per-address" || addr.KeySource != "client_address" || strings.Join(addr.OnStatus, ",") != "401,4xx" ||
		addr.Counter == "" || addr.Key == "" || addr.Remaining != 3 || addr.Limit != 3 || addr.Cost != "" {
		t.Fatalf("address limit = %+v", addr)
	}
	if l := addr.Lockout; l == nil || l.InitialSeconds != 60 || l.Factor != 2 || l.MaxSeconds != 240 || l.ForgetSeconds != 480 || l.LockedForSeconds != 0 {
		t.Fatalf("address lockout = %+v", addr.Lockout)
	}
	if account.KeySource != "json_field user.name" || account.Counter != "" || account.Key != "" || account.Lockout != nil {
		t.Fatalf("account limit (its key is in the body explain is not given) = %+v", account)
	}
	if _, _, err := e.locks.Trip(context.Background(), addr.Counter, lockout.Policy{Initial: time.Minute, Factor: 2, Max: 4 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	e.do(t, "POST", "/v1/explain", body, 200, &hx)
	if l := hx.Charged[0].Lockout; hx.WouldAnswer != "429" || l.LockedForSeconds != 60 {
		t.Fatalf("explain of a locked-out address = %s, %+v; want 429, 60s left", hx.WouldAnswer, l)
	}

	var cx HTTPExplanation
	e.do(t, "POST", "/v1/explain", `{"http": {"method": "POST", "path": "/chat", "headers": {"x-tenant-id": "acme"}}}`, 200, &cx)
	if len(cx.Charged) != 1 || cx.Charged[0].Cost != "json_field usage.total_tokens, default 50" ||
		cx.Charged[0].Reserve != "header x-max-tokens, default 10" || cx.Charged[0].KeySource != "caller" ||
		cx.Charged[0].Remaining != 1000 || cx.WouldAnswer != "admit" {
		t.Fatalf("explain of a cost limit = %+v", cx)
	}
}

// TestExplainTierOnlyChargedRoute: a route whose only limits are its
// tier's charged ones (the shipped /llm) is explained, not answered 503.
func TestExplainTierOnlyChargedRoute(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	var hx HTTPExplanation
	e.do(t, "POST", "/v1/explain", `{"http": {"method": "POST", "path": "/llm/chat", "headers": {"x-tenant-id": "acme"}}}`, 200, &hx)
	if hx.Route != "llm" || hx.WouldAnswer != "admit" || len(hx.Limits) != 0 || len(hx.Charged) != 1 ||
		hx.Charged[0].Name != "tokens-free" || hx.Charged[0].Remaining != 100 {
		t.Fatalf("explain of a tier-only charged route = %+v", hx)
	}
}

// TestRecordGetAndDelete: a record in flight is shown and kept unless
// forced; a completed one is shown with its body and deleted.
func TestRecordGetAndDelete(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	ctx := context.Background()
	ttls := idempotency.TTLs{Lease: 30 * time.Second, Record: time.Hour}
	o, err := e.records.Begin(ctx, "acme", "k1", idempotency.Fingerprint{}, ttls)
	if err != nil {
		t.Fatal(err)
	}
	q := "/v1/idempotency/record?identity=acme&route=orders&key=k1"
	var rs RecordState
	e.do(t, "GET", q, "", 200, &rs)
	if rs.State != "in_progress" || rs.Owner != o.Lease.Token || rs.ExpiresInSeconds != 30 || rs.Body != "none" {
		t.Fatalf("in flight = %+v", rs)
	}
	e.do(t, "DELETE", q, "", 409, nil)
	if err := e.records.Complete(ctx, o.Lease, idempotency.Response{Status: 201, Body: []byte("hello")}); err != nil {
		t.Fatal(err)
	}
	e.do(t, "GET", q, "", 200, &rs)
	if rs.State != "completed" || rs.Status != 201 || rs.BodyBytes != 5 || rs.Body != "inline" {
		t.Fatalf("completed = %+v", rs)
	}
	e.do(t, "DELETE", q, "", 200, &rs)
	if !rs.Deleted {
		t.Fatalf("delete = %+v", rs)
	}
	e.do(t, "GET", q, "", 404, nil)
	if _, err := e.records.Begin(ctx, "acme", "k2", idempotency.Fingerprint{}, ttls); err != nil {
		t.Fatal(err)
	}
	e.do(t, "DELETE", "/v1/idempotency/record?identity=acme&route=orders&key=k2&force=true", "", 200, &rs)
	e.do(t, "GET", "/v1/idempotency/record?identity=acme&route=nope&key=k2", "", 404, nil)
	e.do(t, "GET", "/v1/idempotency/record?identity=acme&route=orders", "", 400, nil)
}

func counter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
