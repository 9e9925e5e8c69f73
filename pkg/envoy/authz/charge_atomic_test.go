package authz

import (
	"context"
	"sync"
	"testing"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/extauthz/extauthz/internal/testclock"
	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
	"github.com/extauthz/extauthz/pkg/ratelimit"
	lockoutmem "github.com/extauthz/extauthz/pkg/ratelimit/lockout/memstore"
)

// atomicPolicy holds the routes of issue 36's attacks on the check and
// charge flow: guesses and reservations in flight at once.
const atomicPolicy = `
http:
  identity:
    sources: [{tenant_header: x-tenant-id}]
  tiers:
    plans:
      attribute: {header: x-plan}
      default: free
      limits:
        free: [{name: tokens, requests_per_unit: 100, unit: hour, charge: {cost: {header: x-usage-tokens, default: 0}, reserve: {default: 1}}}]
  routes:
    - name: login
      path_prefix: /login
      rate_limits:
        - name: per-address
          requests_per_unit: 5
          unit: minute
          algorithm: fixed_window
          charge:
            on_status: [401]
            key: {client_address: {}}
            lockout: {initial: 1m}
    - name: chat
      path_prefix: /v1/chat
      rate_limits:
        - name: tokens
          requests_per_unit: 1000
          unit: minute
          algorithm: fixed_window
          charge:
            cost: {header: x-usage-tokens, default: 0}
            reserve: {header: x-max-tokens, default: 0}
    - name: keyed
      path_prefix: /keyed
      idempotency: {key_required: true}
      rate_limits:
        - {name: tokens, requests_per_unit: 1000, unit: minute, algorithm: fixed_window, charge: {cost: {header: x-usage, default: 50}, reserve: {default: 100}}}
    - name: payments
      path_prefix: /payments
      rate_limits:
        - {name: tokens, requests_per_unit: 5000, unit: minute, algorithm: fixed_window, charge: {cost: {header: x-usage, default: 0}}}
    - name: spend
      path_prefix: /spend
      rate_limits:
        - name: tokens
          requests_per_unit: 1000
          unit: minute
          algorithm: fixed_window
          charge: {cost: {header: x-usage, default: 0}, reserve: {header: x-max-tokens, default: 1}, lockout: {initial: 1m}}
    - name: two
      path_prefix: /two
      rate_limits:
        - {name: per-address, requests_per_unit: 10, unit: minute, algorithm: fixed_window, charge: {on_status: [401], key: {client_address: {}}}}
        - {name: per-account, requests_per_unit: 1, unit: minute, algorithm: fixed_window, charge: {on_status: [401], key: {header: x-user}}}
    - {name: llm, path_prefix: /llm, tier_limits: plans}
`

// checkAll sends reqs to Check at once and returns the responses. It may
// run on a goroutine of its own: a failed Check is an error, not a Fatal.
func (e *chargeEnv) checkAll(t *testing.T, reqs []*authv3.CheckRequest) []*authv3.CheckResponse {
	t.Helper()
	out := make([]*authv3.CheckResponse, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Go(func() { out[i], errs[i] = e.authz.Check(context.Background(), r) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Errorf("Check: %v", err)
		}
	}
	return out
}

func admittedOnes(resps []*authv3.CheckResponse) []*authv3.CheckResponse {
	var out []*authv3.CheckResponse
	for _, r := range resps {
		if r.GetOkResponse() != nil {
			out = append(out, r)
		}
	}
	return out
}

// 30 wrong passwords from one address at once against a limit of 5: at
// most 5 reach the upstream (each check reserves its hit), and once their
// 401s arrive the address is locked out.
func TestChargeParallelGuessesNeverExceedTheLimit(t *testing.T) {
	t.Parallel()
	e := startCharge(t, atomicPolicy)
	reqs := make([]*authv3.CheckRequest, 30)
	for i := range reqs {
		reqs[i] = checkFrom("198.51.100.9", "POST", "/login", nil)
	}
	in := admittedOnes(e.checkAll(t, reqs))
	if len(in) > 5 {
		t.Fatalf("%d of 30 parallel guesses reached the upstream, limit 5", len(in))
	}
	for _, r := range in {
		e.respond(t, chargeAdmitted(t, r), 401, nil)
	}
	wantDenied(t, e.check(t, checkFrom("198.51.100.9", "POST", "/login", nil)), 429, ProblemLockedOut)
}

// The same guesses through ext_proc alone: every stream's headers arrive
// before any response.
func TestChargeParallelGuessesExtProcAlone(t *testing.T) {
	t.Parallel()
	e := startCharge(t, atomicPolicy)
	attrs := map[string]*structpb.Struct{"envoy.filters.http.ext_proc": {Fields: map[string]*structpb.Value{
		"source.address": structpb.NewStringValue("192.0.2.7:5000")}}}
	var in []*stream
	for range 30 {
		s := e.open(t)
		h := reqHeaders(filterv3.ProcessingMode_NONE, true, nil, ":method", "POST", ":path", "/login")
		h.Attributes = attrs
		if r := s.send(h); r.GetImmediateResponse() == nil {
			in = append(in, s)
		} else {
			s.close()
		}
	}
	if len(in) > 5 {
		t.Fatalf("%d of 30 guesses in flight reached the upstream, limit 5", len(in))
	}
	for _, s := range in {
		s.upstream(401, nil, viaUpstream, 0)
	}
}

// 20 requests at once, each reserving its real cost (300) with 400 left:
// exactly 2 are admitted (the second with 100 left, over by one
// reservation), whatever the interleaving.
func TestChargeConcurrentReservationsAdmitExactly(t *testing.T) {
	t.Parallel()
	clock := testclock.New(envoytest.T0)
	lo := lockoutmem.New(lockoutmem.Config{Now: clock.Now})
	limits := roundTripStore{envoytest.NewTestStore(t, clock.Now)}
	e := startChargeOn(t, atomicPolicy, clock, limits, lo)
	admitConcurrentReservations(t, []*chargeEnv{e})
}

// roundTripStore is a memory store whose every call takes a network round
// trip's time, as Redis's does: what a check and a charge in two calls
// leave between them is then as wide as in production.
type roundTripStore struct{ ratelimit.Store }

func (s roundTripStore) AllowBatch(ctx context.Context, reqs []ratelimit.Request) ([]ratelimit.Decision, error) {
	time.Sleep(2 * time.Millisecond)
	return s.Store.AllowBatch(ctx, reqs)
}

// admitConcurrentReservations spends 600 of acme's 1000 on /v1/chat, then
// sends 20 reservations of 300 at once, spread over the replicas, and
// requires exactly 2 admitted.
func admitConcurrentReservations(t *testing.T, replicas []*chargeEnv) {
	t.Helper()
	chat := func(kv ...string) *authv3.CheckRequest {
		return checkFrom("192.0.2.1", "POST", "/v1/chat", nil, append([]string{"x-tenant-id", "acme"}, kv...)...)
	}
	md := chargeAdmitted(t, replicas[0].check(t, chat("x-max-tokens", "600")))
	replicas[len(replicas)-1].respond(t, md, 200, nil, "x-usage-tokens", "600")
	var wg sync.WaitGroup
	got := make([][]*authv3.CheckResponse, len(replicas))
	for i, r := range replicas {
		reqs := make([]*authv3.CheckRequest, 20/len(replicas))
		for j := range reqs {
			reqs[j] = chat("x-max-tokens", "300")
		}
		wg.Go(func() { got[i] = r.checkAll(t, reqs) })
	}
	wg.Wait()
	n := 0
	for _, g := range got {
		n += len(admittedOnes(g))
	}
	if n != 2 {
		t.Errorf("%d of 20 concurrent reservations of 300 admitted with 400 left, want exactly 2", n)
	}
}

// Finding 5: in ext_proc-alone wiring a client-sent x-extauthz-replay on
// a charged route without idempotency makes nothing a replay: the
// response is charged in full.
func TestChargeForgedReplayHeaderIsCharged(t *testing.T) {
	t.Parallel()
	e := startCharge(t, atomicPolicy)
	s := e.open(t)
	h := reqHeaders(filterv3.ProcessingMode_NONE, true, nil, ":method", "POST", ":path", "/payments",
		"x-tenant-id", "acme", HeaderReplayTicket, "forged", HeaderReplayScope, "forged")
	if r := s.send(h); r.GetImmediateResponse() != nil {
		t.Fatalf("refused: %v", r)
	}
	s.upstream(200, nil, viaUpstream, 0, "x-usage", "3000")
	labels := map[string]string{"route": "payments", "limit": "tokens"}
	if got := e.counter(t, "extauthz_charged_cost_total", labels); got != 3000 {
		t.Errorf("charged %v, want 3000: a client header made the stream a replay", got)
	}
	if got := e.counter(t, "extauthz_charge_refunded_total", labels); got != 0 {
		t.Errorf("refunded %v, want nothing", got)
	}
}

// Finding 6: in ext_proc-alone wiring a request answered locally after its
// reservation (here: no Idempotency-Key, 400) never runs: the reservation
// is refunded at once, so the budget is whole for the next request.
func TestChargeImmediateResponseRefundsExtProcAlone(t *testing.T) {
	t.Parallel()
	e := startCharge(t, atomicPolicy)
	for range 3 {
		s := e.open(t)
		h := reqHeaders(filterv3.ProcessingMode_BUFFERED, true, nil, ":method", "POST", ":path", "/keyed", "x-tenant-id", "acme")
		wantProblemIR(t, s.send(h).GetImmediateResponse(), 400, ProblemKeyMissing)
		s.close()
	}
	labels := map[string]string{"route": "keyed", "limit": "tokens"}
	if got := e.counter(t, "extauthz_charge_refunded_total", labels); got != 300 {
		t.Errorf("refunded %v, want the three reservations (300): a request that never ran was charged", got)
	}
	s := e.open(t)
	h := reqHeaders(filterv3.ProcessingMode_BUFFERED, true, nil, ":method", "POST", ":path", "/keyed", "x-tenant-id", "acme", "idempotency-key", `"k1"`)
	if r := s.send(h); r.GetImmediateResponse() != nil {
		t.Fatalf("refused: %s", r.GetImmediateResponse().GetBody())
	}
	s.upstream(200, nil, viaUpstream, 0, "x-usage", "10")
	if got, refunded := e.counter(t, "extauthz_charged_cost_total", labels), e.counter(t, "extauthz_charge_refunded_total", labels); got-refunded != 10 {
		t.Errorf("net charge %v (charged %v, refunded %v), want 10", got-refunded, got, refunded)
	}
}

// Finding 7: a reservation that spends the budget trips the lockout at
// once; the next request is locked out before any response arrives.
func TestChargeReservationThatSpendsTrips(t *testing.T) {
	t.Parallel()
	e := startCharge(t, atomicPolicy)
	chargeAdmitted(t, e.check(t, checkFrom("192.0.2.1", "POST", "/spend", nil, "x-tenant-id", "acme", "x-max-tokens", "1000")))
	wantDenied(t, e.check(t, checkFrom("192.0.2.1", "POST", "/spend", nil, "x-tenant-id", "acme")), 429, ProblemLockedOut)
}

// Several charged limits on one route: when one refuses, the reservations
// the others took in the same check are refunded.
func TestChargeRefusalRefundsTheOthers(t *testing.T) {
	t.Parallel()
	e := startCharge(t, atomicPolicy)
	two := func(user string) *authv3.CheckResponse {
		return e.check(t, checkFrom("192.0.2.1", "POST", "/two", nil, "x-tenant-id", "acme", "x-user", user))
	}
	chargeAdmitted(t, two("carol"))
	for range 3 {
		wantDenied(t, two("carol"), 429, ProblemQuotaExceeded)
	}
	ex, err := e.az.Explain(context.Background(), HTTPRequest{Method: "POST", Path: "/two", SourceAddress: "192.0.2.1:1", Headers: map[string]string{"x-tenant-id": "acme", "x-user": "dave"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := ex.Charged[0].Result.Remaining; got != 9 {
		t.Errorf("per-address remaining %d after one admitted and three refused, want 9", got)
	}
}

// Finding 8: explain works on a route whose only limits are its tiers'
// charged ones.
func TestExplainTierOnlyChargedRoute(t *testing.T) {
	t.Parallel()
	e := startCharge(t, atomicPolicy)
	ex, err := e.az.Explain(context.Background(), HTTPRequest{Method: "POST", Path: "/llm", Headers: map[string]string{"x-tenant-id": "acme"}})
	if err != nil {
		t.Fatalf("explain /llm: %v", err)
	}
	if !ex.Allowed || len(ex.Charged) != 1 || ex.Charged[0].Result.Remaining != 100 {
		t.Errorf("explain /llm: allowed %v, charged %+v; want admitted with 100 left", ex.Allowed, ex.Charged)
	}
}

// Finding 7: a reconciliation of 0 (a cost equal to its reservation) still
// reads the state after it: a budget another request spent trips the
// lockout again once the first lockout has ended.
func TestChargeReconciliationOfNothingTrips(t *testing.T) {
	t.Parallel()
	e := startCharge(t, `
http:
  identity:
    sources: [{tenant_header: x-tenant-id}]
  routes:
    - name: spend
      path_prefix: /spend
      rate_limits:
        - name: tokens
          requests_per_unit: 1000
          unit: hour
          algorithm: fixed_window
          charge: {cost: {header: x-usage, default: 0}, reserve: {header: x-max-tokens, default: 1}, lockout: {initial: 1m}}
`)
	spend := func() *authv3.CheckRequest {
		return checkFrom("192.0.2.1", "POST", "/spend", nil, "x-tenant-id", "acme", "x-max-tokens", "500")
	}
	a := chargeAdmitted(t, e.check(t, spend()))
	chargeAdmitted(t, e.check(t, spend())) // 1000 of 1000: spent, tripped
	e.clock.Advance(2 * time.Minute)       // the lockout is over, the hour is not
	e.respond(t, a, 200, nil, "x-usage", "500")
	labels := map[string]string{"route": "spend", "limit": "tokens", "event": LockoutTrip}
	if got := e.counter(t, "extauthz_lockouts_total", labels); got != 2 {
		t.Errorf("trips %v, want 2: the reconciliation of 0 on a spent budget did not trip", got)
	}
	wantDenied(t, e.check(t, spend()), 429, ProblemLockedOut)
}
