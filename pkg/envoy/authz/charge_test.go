package authz

import (
	"strconv"
	"testing"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// Five failed logins from one address: the next attempt, even with the
// right password, is refused (the lockout trips on the fifth); successes
// never count; another address is unaffected; once the lockout and the
// window are over the address logs in again, and its next five failures
// lock it out for twice as long.
func TestChargeFailedLoginsPerAddress(t *testing.T) {
	t.Parallel()
	e := startCharge(t, chargePolicy)
	for range 10 {
		chargeAdmitted(t, e.login(t, "192.0.2.1", "alice", 200)) // successes never count
	}
	for i := range 5 {
		chargeAdmitted(t, e.login(t, "192.0.2.1", "u"+string(rune('a'+i)), 401))
	}
	locked := e.login(t, "192.0.2.1", "alice", 200)
	wantDenied(t, locked, 429, ProblemLockedOut)
	if got := retryAfterSecs(t, locked); got != 60 {
		t.Errorf("Retry-After %d, want 60 (the first lockout)", got)
	}
	chargeAdmitted(t, e.login(t, "192.0.2.2", "alice", 200)) // another address

	e.clock.Advance(time.Minute) // the lockout and the window are over
	for i := range 5 {
		chargeAdmitted(t, e.login(t, "192.0.2.1", "v"+string(rune('a'+i)), 403))
	}
	if got := retryAfterSecs(t, e.login(t, "192.0.2.1", "alice", 200)); got != 120 {
		t.Errorf("second lockout Retry-After %d, want 120 (factor 2)", got)
	}
	labels := map[string]string{"route": "login", "limit": "login-per-address"}
	if got := e.counter(t, "extauthz_lockouts_total", with(labels, "event", LockoutTrip)); got != 2 {
		t.Errorf("trips %v, want 2", got)
	}
	if got := e.counter(t, "extauthz_lockouts_total", with(labels, "event", LockoutRefused)); got != 2 {
		t.Errorf("refusals %v, want 2", got)
	}
	if got := e.counter(t, "extauthz_charges_total", with(with(labels, "kind", ChargeKindOutcome), "result", ChargeSpent)); got != 2 {
		t.Errorf("spending charges %v, want 2", got)
	}
}

func with(m map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for a, b := range m {
		out[a] = b
	}
	return out
}

// Twenty failures against one account from twenty addresses: the account
// is refused from any address (quota-exceeded, with RateLimit headers);
// another account is not; a request without the field is refused (its
// account cannot be read: never unlimited).
func TestChargeFailedLoginsPerAccount(t *testing.T) {
	t.Parallel()
	e := startCharge(t, chargePolicy)
	for i := range 20 {
		// (Not itoa: "198.51.100.01" is no IP address; such requests once
		// escaped the address limit, and now share one key.)
		chargeAdmitted(t, e.login(t, "198.51.100."+strconv.Itoa(i+1), "alice", 401))
	}
	over := e.login(t, "203.0.113.9", "alice", 200)
	wantDenied(t, over, 429, ProblemQuotaExceeded)
	if got := deniedHeader(over, "ratelimit-policy"); len(got) != 1 || got[0] != `"login-per-address";q=5;w=60, "login-per-account";q=20;w=3600` {
		t.Errorf("RateLimit-Policy %v", got)
	}
	chargeAdmitted(t, e.login(t, "203.0.113.9", "bob", 200))
	wantDenied(t, e.check(t, checkFrom("203.0.113.9", "POST", "/login", []byte(`{"password":"x"}`))), 400, ProblemChargeKeyUnreadable)
}

func itoa(i int) string { return string(rune('0'+i/10)) + string(rune('0'+i%10)) }

// The account name is hashed into the key: the handoff never carries it.
func TestChargeAccountKeyHashed(t *testing.T) {
	t.Parallel()
	e := startCharge(t, chargePolicy)
	md := chargeAdmitted(t, e.check(t, checkFrom("192.0.2.1", "POST", "/login", []byte(`{"username":"alice@example.com"}`))))
	limits := md.GetFilterMetadata()["envoy.filters.http.ext_authz"].GetFields()[MetadataCharge].GetStructValue().GetFields()[mdChargeLimits].GetListValue().GetValues()
	if len(limits) != 2 {
		t.Fatalf("handoff %v, want both limits", limits)
	}
	for _, l := range limits {
		key := l.GetStructValue().GetFields()[mdChargeKey].GetStringValue()
		if containsFold(key, "alice") || key == "" {
			t.Errorf("key %q holds the account in clear", key)
		}
	}
}

func containsFold(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// A form-encoded login names its account in a form field.
func TestChargeFormFieldKey(t *testing.T) {
	t.Parallel()
	e := startCharge(t, chargePolicy)
	form := func(addr string, status int) bool {
		resp := e.check(t, checkFrom(addr, "POST", "/form-login", []byte("username=carol&password=x"), "content-type", "application/x-www-form-urlencoded"))
		if resp.GetOkResponse() == nil {
			return false
		}
		e.respond(t, chargeAdmitted(t, resp), status, nil)
		return true
	}
	if !form("192.0.2.1", 401) || !form("192.0.2.2", 401) {
		t.Fatal("the first two failures were refused")
	}
	if form("192.0.2.3", 200) {
		t.Error("carol's third attempt admitted after two failures (limit 2)")
	}
}

// A budget of 1000 tokens per minute, replies costing 300 in the JSON
// body: admitted four times (the fourth overshoots within the bound), then
// refused until the window frees.
func TestChargeCostFromJSONBody(t *testing.T) {
	t.Parallel()
	e := startCharge(t, chargePolicy)
	chat := func() bool {
		resp := e.check(t, checkFrom("192.0.2.1", "POST", "/v1/chat", nil, "x-tenant-id", "acme"))
		if resp.GetOkResponse() == nil {
			wantDenied(t, resp, 429, ProblemQuotaExceeded)
			return false
		}
		e.respond(t, chargeAdmitted(t, resp), 200, []byte(`{"id":"x","usage":{"prompt_tokens":100,"total_tokens":300}}`), "content-type", "application/json")
		return true
	}
	for i := range 4 {
		if !chat() {
			t.Fatalf("request %d refused", i+1)
		}
	}
	if chat() {
		t.Fatal("fifth request admitted with 1200 of 1000 spent")
	}
	e.clock.Advance(time.Minute)
	if !chat() {
		t.Error("refused after the window freed")
	}
	labels := map[string]string{"route": "chat", "limit": "tokens"}
	if got := e.counter(t, "extauthz_charged_cost_total", labels); got != 1500 {
		t.Errorf("charged cost %v, want 1500", got)
	}
}

// A streamed reply is charged from its last event carrying the field.
func TestChargeCostFromLastEvent(t *testing.T) {
	t.Parallel()
	e := startCharge(t, chargePolicy)
	md := chargeAdmitted(t, e.check(t, checkFrom("192.0.2.1", "POST", "/v1/chat", nil, "x-tenant-id", "acme")))
	s := e.open(t)
	first := reqHeaders(filterv3.ProcessingMode_NONE, true, md, ":method", "POST", ":path", "/v1/chat")
	first.ProtocolConfig.ResponseBodyMode = filterv3.ProcessingMode_STREAMED
	s.send(first)
	s.send(respHeaders(respAttrs(viaUpstream, 0), false, ":status", "200", "content-type", "text/event-stream"))
	for _, chunk := range []string{"data: {\"choices\":[{\"delta\":\"hi\"}]}\n\n", "data: {\"usage\":{\"total_", "tokens\":999}}\n\n", "data: [DONE]\n\n"} {
		s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: []byte(chunk)}}})
	}
	s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{EndOfStream: true}}})
	s.close()
	if got := e.counter(t, "extauthz_charged_cost_total", map[string]string{"route": "chat", "limit": "tokens"}); got != 999 {
		t.Errorf("charged %v, want 999", got)
	}
	// 1 left: admitted; the next reply spends it.
	chargeAdmitted(t, e.check(t, checkFrom("192.0.2.1", "POST", "/v1/chat", nil, "x-tenant-id", "acme")))
}

// A reservation is charged up front and reconciled with the real cost: a
// reply costing less refunds the difference.
func TestChargeReservationReconciled(t *testing.T) {
	t.Parallel()
	e := startCharge(t, chargePolicy)
	md := chargeAdmitted(t, e.check(t, checkFrom("192.0.2.1", "POST", "/v1/chat", nil, "x-tenant-id", "acme", "x-max-tokens", "800")))
	// 800 reserved, 200 left: another request is admitted and reserves 800 more (over: the next is refused).
	md2 := chargeAdmitted(t, e.check(t, checkFrom("192.0.2.1", "POST", "/v1/chat", nil, "x-tenant-id", "acme", "x-max-tokens", "800")))
	wantDenied(t, e.check(t, checkFrom("192.0.2.1", "POST", "/v1/chat", nil, "x-tenant-id", "acme")), 429, ProblemQuotaExceeded)
	e.respond(t, md, 200, []byte(`{"usage":{"total_tokens":100}}`))
	e.respond(t, md2, 200, []byte(`{"usage":{"total_tokens":100}}`))
	labels := map[string]string{"route": "chat", "limit": "tokens"}
	if got := e.counter(t, "extauthz_charge_refunded_total", labels); got != 1400 {
		t.Errorf("refunded %v, want 1400 (2 x 800 reserved - 100 used)", got)
	}
	// 200 spent of 1000: admitted again.
	chargeAdmitted(t, e.check(t, checkFrom("192.0.2.1", "POST", "/v1/chat", nil, "x-tenant-id", "acme")))
}

// A cost missing from the reply charges the default; a stream that ends
// before its trailer keeps the reservation.
func TestChargeCostMissing(t *testing.T) {
	t.Parallel()
	e := startCharge(t, chargePolicy)
	md := chargeAdmitted(t, e.check(t, checkFrom("192.0.2.1", "GET", "/h", nil, "x-tenant-id", "acme")))
	e.respond(t, md, 200, nil) // no x-usage-tokens: default 50
	md = chargeAdmitted(t, e.check(t, checkFrom("192.0.2.1", "GET", "/h", nil, "x-tenant-id", "acme")))
	e.respond(t, md, 200, nil, "x-usage-tokens", "950") // 1000 spent
	wantDenied(t, e.check(t, checkFrom("192.0.2.1", "GET", "/h", nil, "x-tenant-id", "acme")), 429, ProblemQuotaExceeded)
	if got := e.counter(t, "extauthz_charges_total", map[string]string{"route": "header-cost", "limit": "tokens", "kind": ChargeKindCost, "result": ChargeMissing}); got != 1 {
		t.Errorf("missing %v, want 1", got)
	}

	// Trailer: the reservation (100) stands when the stream ends without it.
	md = chargeAdmitted(t, e.check(t, checkFrom("192.0.2.1", "GET", "/t", nil, "x-tenant-id", "acme")))
	s := e.open(t)
	s.send(reqHeaders(filterv3.ProcessingMode_NONE, true, md, ":method", "GET", ":path", "/t"))
	s.send(respHeaders(respAttrs(viaUpstream, 0), false, ":status", "200"))
	s.close() // upstream reset: no trailers
	md = chargeAdmitted(t, e.check(t, checkFrom("192.0.2.1", "GET", "/t", nil, "x-tenant-id", "acme")))
	s = e.open(t)
	s.send(reqHeaders(filterv3.ProcessingMode_NONE, true, md, ":method", "GET", ":path", "/t"))
	s.send(respHeaders(respAttrs(viaUpstream, 0), false, ":status", "200"))
	s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{Trailers: hdrs("x-usage-tokens", "900")}}})
	s.close()
	labels := map[string]string{"route": "trailer-cost", "limit": "tokens"}
	if got := e.counter(t, "extauthz_charged_cost_total", labels); got != 100+100+800 {
		t.Errorf("charged %v, want 1000 (two reservations of 100, then 800 more)", got)
	}
	wantDenied(t, e.check(t, checkFrom("192.0.2.1", "GET", "/t", nil, "x-tenant-id", "acme")), 429, ProblemQuotaExceeded)
}

// ext_proc alone (wiring a): the check runs on the request (after its body
// for a body key), the charge on the response.
func TestChargeExtProcAlone(t *testing.T) {
	t.Parallel()
	e := startCharge(t, chargePolicy)
	attrs := map[string]*structpb.Struct{"envoy.filters.http.ext_proc": {Fields: map[string]*structpb.Value{
		"source.address": structpb.NewStringValue("192.0.2.7:5000")}}}
	attempt := func(user string, status int) bool {
		s := e.open(t)
		h := reqHeaders(filterv3.ProcessingMode_BUFFERED, false, nil, ":method", "POST", ":path", "/login", "content-type", "application/json")
		h.Attributes = attrs
		if r := s.send(h); r.GetImmediateResponse() != nil {
			t.Fatalf("refused on headers before the body: %v", r)
		}
		r := s.send(reqBody([]byte(`{"username":"` + user + `"}`)))
		if ir := r.GetImmediateResponse(); ir != nil {
			if ir.GetStatus().GetCode() != 429 {
				t.Fatalf("refused with %d", ir.GetStatus().GetCode())
			}
			s.close()
			return false
		}
		s.upstream(status, nil, viaUpstream, 0)
		return true
	}
	for i := range 5 {
		if !attempt("w"+itoa(i), 401) {
			t.Fatalf("failure %d refused", i+1)
		}
	}
	if attempt("alice", 200) {
		t.Error("admitted after five failures from the address")
	}
}

// An exempt request is never checked nor charged.
func TestChargeExempt(t *testing.T) {
	t.Parallel()
	e := startCharge(t, chargePolicy)
	for range 8 {
		resp := e.check(t, checkFrom("192.0.2.1", "POST", "/login", []byte(`{"username":"a"}`), "x-internal", "yes"))
		e.respond(t, chargeAdmitted(t, resp), 401, nil)
	}
	chargeAdmitted(t, e.login(t, "192.0.2.1", "a", 200))
}

// A tier's charged limit: each plan its own budget, keyed by the tier.
func TestChargeTierBudgets(t *testing.T) {
	t.Parallel()
	e := startCharge(t, `
http:
  identity:
    sources: [{tenant_header: x-tenant-id}]
  tiers:
    plans:
      attribute: {header: x-plan}
      default: free
      limits:
        free: [{name: tokens, requests_per_unit: 100, unit: hour, charge: {cost: {header: x-usage-tokens, default: 0}}}]
        pro:  [{name: tokens, requests_per_unit: 10000, unit: hour, charge: {cost: {header: x-usage-tokens, default: 0}}}]
  routes:
    - {name: chat, path_prefix: /, tier_limits: plans}
`)
	use := func(plan string, cost string) bool {
		resp := e.check(t, checkFrom("192.0.2.1", "POST", "/v1", nil, "x-tenant-id", "acme", "x-plan", plan))
		if resp.GetOkResponse() == nil {
			return false
		}
		e.respond(t, chargeAdmitted(t, resp), 200, nil, "x-usage-tokens", cost)
		return true
	}
	if !use("free", "150") || use("free", "1") || use("nope", "1") {
		t.Fatal("the free tier admitted past its budget of 100 (or refused its first request)")
	}
	for i := range 2 {
		if !use("pro", "150") {
			t.Errorf("pro request %d refused: the pro tier shares the free tier's spent budget", i+1)
		}
	}
}

// A body Envoy cut at max_request_bytes could name another account: the
// account cannot be read, and the request is refused (the key's default
// unreadable choice), never admitted unlimited.
func TestChargePartialBodyIsUnreadable(t *testing.T) {
	t.Parallel()
	e := startCharge(t, chargePolicy)
	wantDenied(t, e.check(t, checkFrom("198.51.100.1", "POST", "/login", []byte(`{"username":"alice"}`), "x-envoy-auth-partial-body", "true")),
		400, ProblemChargeKeyUnreadable)
	labels := map[string]string{"route": "login", "limit": "login-per-account", "reason": KeyTooLarge}
	if got := e.counter(t, "extauthz_charge_keys_unreadable_total", labels); got != 1 {
		t.Errorf("unreadable keys counted %v, want 1", got)
	}
}

// A reply replayed from an Idempotency-Key record ran nothing upstream:
// its reservation is refunded and nothing is charged, whatever it says.
func TestChargeReplayedReplyRefunds(t *testing.T) {
	t.Parallel()
	e := startCharge(t, chargePolicy)
	md := chargeAdmitted(t, e.check(t, checkFrom("192.0.2.1", "GET", "/t", nil, "x-tenant-id", "acme")))
	e.respond(t, md, 200, nil, HeaderIdempotentReplayed, "true", "x-usage-tokens", "900")
	labels := map[string]string{"route": "trailer-cost", "limit": "tokens"}
	if got := e.counter(t, "extauthz_charge_refunded_total", labels); got != 100 {
		t.Errorf("refunded %v, want the reservation (100)", got)
	}
	if got := e.counter(t, "extauthz_charged_cost_total", labels); got != 100 {
		t.Errorf("charged %v, want only the reservation (100)", got)
	}
}
