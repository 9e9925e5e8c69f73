package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/test/e2e/upstream"
)

// max_in_flight through Envoy: envoy/front-proxy.yaml's /inflight route
// (ext_authz takes a slot, ext_proc holds it for the request's life) and
// the inflight routes of testdata/policy/http.yaml (5 per tenant; a lost
// slot expires after 30s, on /inflight/crash after 3s).
const (
	inFlightMax      = 5
	inFlightTTL      = 30 * time.Second
	inFlightCrashTTL = 3 * time.Second
	// inFlightWait bounds every wait for a slot to free by a release: far
	// below inFlightTTL, so a slot that frees in time was released, never
	// expired.
	inFlightWait = 5 * time.Second
)

// TestInFlight proves max_in_flight through the real Envoy, two replicas
// and one Redis. The scenarios of "live" share the stack in parallel, each
// with its own tenants; the crash runs alone after them, as killing a
// replica would break the others' streams.
func TestInFlight(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOpts{admin: true})
	t.Run("live", func(t *testing.T) {
		for _, sc := range []scenario{
			{"burst_40_admits_5", testInFlightBurst},
			{"freed_at_response_end", testFreedAtResponseEnd},
			{"freed_by_client_cancel", testFreedByCancel},
			{"freed_by_upstream_504", testFreedByTimeout},
			{"freed_by_upstream_reset_before_response", func(t *testing.T, s *stack) { testFreedByReset(t, s, "before") }},
			{"freed_by_upstream_reset_mid_body", func(t *testing.T, s *stack) { testFreedByReset(t, s, "mid-body") }},
		} {
			t.Run(sc.name, func(t *testing.T) {
				t.Parallel()
				sc.run(t, s)
			})
		}
	})
	t.Run("replica_killed_slots_expire", func(t *testing.T) { testInFlightCrash(t, s) })
}

// inFlightGet is a GET of path by tenant with extra header pairs.
func inFlightGet(path, tenant string, extra ...string) req {
	r := tenantGet(path, tenant)
	for i := 0; i+1 < len(extra); i += 2 {
		r.header[extra[i]] = extra[i+1]
	}
	return r
}

// 40 concurrent requests of one tenant, held at the upstream: exactly 5
// reach it, never more at once; the other 35 are answered 429 at once
// (while the 5 are still held, not queued behind them), with the
// concurrent-requests quota and a problem body. Another tenant is admitted
// meanwhile.
func testInFlightBurst(t *testing.T, s *stack) {
	const n = 40
	tenant, path := uniq("burst"), "/inflight/burst"
	start := time.Now()
	calls := make([]*call, n)
	for i := range calls {
		calls[i] = s.start(t, inFlightGet(path, tenant, upstream.HeaderHold, tenant))
	}
	refused := waitDone(t, calls, n-inFlightMax, 8*time.Second)
	t.Logf("%d refused within %v", len(refused), time.Since(start).Round(time.Millisecond))
	for _, c := range refused {
		wantInFlight429(t, c.rep, "inflight", inFlightTTL)
	}
	if r := s.up.Running(tenant); r != inFlightMax {
		t.Errorf("%d requests running at the upstream while the rest were refused, want %d", r, inFlightMax)
	}
	other := uniq("other")
	if r := s.do(t, tenantGet(path, other)); r.status != http.StatusOK {
		t.Errorf("another tenant while the first is saturated: got %s, want 200", r)
	}
	for _, rep := range s.replicas { // either replica sees the shared slots
		if ex := explainInFlight(t, rep, path, tenant); ex.InFlight.Held != inFlightMax || ex.WouldAnswer != "429" {
			t.Errorf("%s admin explain while saturated: %+v, want %d held and 429", rep.name, ex.InFlight, inFlightMax)
		}
	}
	s.up.Release(tenant)
	for _, c := range calls {
		<-c.done
	}
	ok := 0
	for _, c := range calls {
		if c.err == nil && c.rep.status == http.StatusOK {
			ok++
		}
	}
	if ok != inFlightMax || s.up.Executions(tenant, "") != inFlightMax {
		t.Errorf("%d admitted, %d executed, want %d", ok, s.up.Executions(tenant, ""), inFlightMax)
	}
	if m := s.up.MaxConcurrent(tenant); m != inFlightMax {
		t.Errorf("the upstream saw %d requests of the tenant at once, want %d", m, inFlightMax)
	}
	waitFreed(t, s.replicas[0], path, tenant)
}

// waitFreed waits until rep's admin API counts no slot of tenant: every
// ending releases its slot (the client may read its reply a moment before
// Envoy ends the ext_proc stream).
func waitFreed(t *testing.T, rep *replica, path, tenant string) {
	t.Helper()
	deadline := time.Now().Add(inFlightWait)
	for ex := explainInFlight(t, rep, path, tenant); ex.InFlight.Held != 0 || ex.WouldAnswer != "admit"; ex = explainInFlight(t, rep, path, tenant) {
		if time.Now().After(deadline) {
			t.Fatalf("%d slots still held %v after every request ended", ex.InFlight.Held, inFlightWait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Five responses have started (headers at the client) while their bodies
// are held: the slots stay taken until a response ends, not at its
// headers. One body completes: exactly one slot frees.
func testFreedAtResponseEnd(t *testing.T, s *stack) {
	tenant, path := uniq("end"), "/inflight/end"
	calls := make([]*call, inFlightMax)
	for i := range calls {
		calls[i] = s.start(t, inFlightGet(path, tenant, upstream.HeaderHoldBody, tenant+strconv.Itoa(i)))
		<-calls[i].started
		if calls[i].startErr != nil || calls[i].status != http.StatusOK {
			t.Fatalf("request %d: got %d, %v; want 200 headers", i, calls[i].status, calls[i].startErr)
		}
	}
	wantInFlight429(t, s.do(t, tenantGet(path, tenant)), "inflight", inFlightTTL)
	s.up.Release(tenant + "0")
	<-calls[0].done
	if calls[0].err != nil || calls[0].rep.status != http.StatusOK {
		t.Fatalf("completed request: got %s, %v; want 200", calls[0].rep, calls[0].err)
	}
	wantOneFreed(t, s, path, tenant)
}

// A client that goes away mid-request frees its slot.
func testFreedByCancel(t *testing.T, s *stack) {
	tenant, path := uniq("cancel"), "/inflight/cancel"
	calls := fill(t, s, path, tenant, inFlightMax)
	calls[0].cancel()
	<-calls[0].done
	waitRunning(t, s, tenant, inFlightMax-1)
	wantOneFreed(t, s, path, tenant)
}

// Requests slower than the route's timeout (10s): Envoy answers 504 and
// resets the upstream request; every slot frees (five more are admitted,
// then the sixth is refused).
func testFreedByTimeout(t *testing.T, s *stack) {
	tenant, path := uniq("timeout"), "/inflight/timeout"
	calls := fill(t, s, path, tenant, inFlightMax)
	for _, c := range calls {
		<-c.done
		if c.err != nil || c.rep.status != http.StatusGatewayTimeout {
			t.Fatalf("request beyond the route timeout: got %s, %v; want 504", c.rep, c.err)
		}
	}
	waitRunning(t, s, tenant, 0)
	fill(t, s, path, tenant, inFlightMax)
	wantInFlight429(t, s.do(t, tenantGet(path, tenant)), "inflight", inFlightTTL)
}

// The upstream resets its connection, before any response byte (Envoy
// answers 503) or in the middle of the body (Envoy resets the client's
// stream): the slot frees.
func testFreedByReset(t *testing.T, s *stack, when string) {
	tenant, path := uniq("reset"), "/inflight/reset"
	calls := fill(t, s, path, tenant, inFlightMax-1)
	hold := tenant + "-reset"
	reset := s.start(t, inFlightGet(path, tenant, upstream.HeaderHold, hold, upstream.HeaderReset, when))
	waitRunning(t, s, tenant, inFlightMax)
	wantInFlight429(t, s.do(t, tenantGet(path, tenant)), "inflight", inFlightTTL)
	s.up.Release(hold)
	<-reset.done
	if reset.err == nil && reset.rep.status == http.StatusOK {
		t.Fatalf("reset %s: got a whole reply %s", when, reset.rep)
	}
	t.Logf("reset %s: client got %d, %v", when, reset.rep.status, reset.err)
	if n := s.up.Running(tenant); n != len(calls) {
		t.Fatalf("%d requests running, want the %d holders", n, len(calls))
	}
	wantOneFreed(t, s, path, tenant)
}

// wantOneFreed checks that exactly one of the tenant's slots is free: one
// more request is admitted (within inFlightWait, so by a release) and the
// next is refused.
func wantOneFreed(t *testing.T, s *stack, path, tenant string) {
	t.Helper()
	start := time.Now()
	admitHeld(t, s, path, tenant, uniq("h"), inFlightWait)
	t.Logf("one more admitted after %v", time.Since(start).Round(time.Millisecond))
	wantInFlight429(t, s.do(t, tenantGet(path, tenant)), "inflight", inFlightTTL)
}

// A replica is SIGKILLed while streams of five held requests run on both.
// The requests whose ext_proc stream died are answered 503 (ext_proc fails
// closed) and the upstream sees them go; their slots, never released, stay
// taken until in_flight_ttl (3s) after their last renewal: the tenant is
// refused meanwhile, and admitted once they expire, exactly as many times
// as slots were lost. Another tenant is admitted throughout.
func testInFlightCrash(t *testing.T, s *stack) {
	tenant, path := uniq("crash"), "/inflight/crash/x"
	calls, on := placeHeld(t, s, path, tenant)
	victim := 0
	if len(on[1]) > len(on[0]) {
		victim = 1
	}
	t.Logf("streams per replica: %d, %d; killing replica %d", len(on[0]), len(on[1]), victim)
	s.replicas[victim].kill()
	killed := time.Now()

	// No lost slot may free before its ttl: renewed every ttl/3, the
	// earliest expiry is 2s after the kill; probe for the first second.
	refused := 0
	for time.Since(killed) < time.Second {
		r := s.do(t, tenantGet(path, tenant))
		switch r.status {
		case http.StatusTooManyRequests:
			refused++
			wantInFlight429(t, r, "inflight-crash", inFlightCrashTTL)
		case http.StatusServiceUnavailable: // a call caught by the crash
			t.Logf("probe %v after the kill: 503", time.Since(killed))
		default:
			t.Fatalf("probe %v after the kill: got %s, want 429 (the lost slots are held until their ttl)", time.Since(killed), r)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if refused == 0 {
		t.Fatal("no probe was refused in the first second after the kill")
	}
	if ex := explainInFlight(t, s.replicas[1-victim], path, tenant); ex.InFlight.Held != inFlightMax {
		t.Errorf("admin explain after the kill: %d slots held, want %d (the lost ones until their ttl)", ex.InFlight.Held, inFlightMax)
	}
	if r := s.do(t, tenantGet(path, uniq("other"))); r.status != http.StatusOK {
		t.Errorf("another tenant after the kill: got %s, want 200", r)
	}

	lost := waitDone(t, calls, len(on[victim]), 5*time.Second)
	for _, c := range lost {
		if c.err == nil && c.rep.status != http.StatusServiceUnavailable {
			t.Errorf("request whose stream died: got %s, want 503 (ext_proc fails closed)", c.rep)
		}
	}
	waitRunning(t, s, tenant, inFlightMax-len(lost))

	admitted := waitAdmitted(t, s, path, tenant, killed.Add(inFlightCrashTTL+inFlightWait))
	t.Logf("first admission %v after the kill (ttl %v)", admitted.Sub(killed).Round(time.Millisecond), inFlightCrashTTL)
	// Every lost slot has expired a ttl after the kill: exactly as many
	// are admitted as were lost.
	time.Sleep(time.Until(killed.Add(inFlightCrashTTL + 500*time.Millisecond)))
	for range lost {
		admitHeld(t, s, path, tenant, uniq("h"), inFlightWait)
	}
	wantInFlight429(t, s.do(t, tenantGet(path, tenant)), "inflight-crash", inFlightCrashTTL)
}

// placeHeld admits five held requests one by one and tells which replica
// holds each one's ext_proc stream (the one whose count of ext_proc
// messages rose); unplaced ones are in neither list.
func placeHeld(t *testing.T, s *stack, path, tenant string) ([]*call, [2][]*call) {
	t.Helper()
	var calls []*call
	var on [2][]*call
	messages := func() []float64 {
		return s.replicaCounter(t, "extauthz_decision_duration_seconds_count", `api="ext_proc"`)
	}
	for range inFlightMax {
		before := messages()
		c := admitHeld(t, s, path, tenant, uniq("h"), inFlightWait)
		calls = append(calls, c)
		// The replica counts the message just after answering it: wait
		// for it, so that it is not taken for the next request's.
		after := messages()
		for deadline := time.Now().Add(2 * time.Second); after[0]+after[1] <= before[0]+before[1] && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
			after = messages()
		}
		switch rose0, rose1 := after[0] > before[0], after[1] > before[1]; {
		case rose0 && !rose1:
			on[0] = append(on[0], c)
		case rose1 && !rose0:
			on[1] = append(on[1], c)
		}
	}
	if len(on[0])+len(on[1]) == 0 {
		t.Fatal("no held request's ext_proc stream could be placed on a replica")
	}
	return calls, on
}

// inFlightExplanation is the part of the admin API's explain answer the
// scenarios read.
type inFlightExplanation struct {
	WouldAnswer string `json:"would_answer"`
	InFlight    struct {
		Limit int    `json:"limit"`
		Held  int    `json:"held"`
		Where string `json:"where"`
	} `json:"in_flight"`
}

// explainInFlight asks rep's admin API what a GET of path by tenant would
// get now: the slots are counted, none taken.
func explainInFlight(t *testing.T, rep *replica, path, tenant string) inFlightExplanation {
	t.Helper()
	body := fmt.Sprintf(`{"http": {"method": "GET", "path": %q, "headers": {"x-tenant-id": %q}}}`, path, tenant)
	resp, err := probeClient.Post("http://"+rep.adminAddr+"/v1/explain", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("%s admin explain: %v", rep.name, err)
	}
	defer resp.Body.Close()
	var ex inFlightExplanation
	if err := json.NewDecoder(resp.Body).Decode(&ex); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s admin explain: %s, %v", rep.name, resp.Status, err)
	}
	if ex.InFlight.Limit != inFlightMax || !strings.Contains(ex.InFlight.Where, ":if:{") {
		t.Errorf("%s admin explain: %+v, want limit %d and the Redis key", rep.name, ex.InFlight, inFlightMax)
	}
	return ex
}

// wantInFlight429 checks a max_in_flight refusal of route: 429, the
// concurrent-requests quota, Retry-After within the slot ttl, a problem
// body naming the route's in-flight policy.
func wantInFlight429(t *testing.T, r reply, route string, ttl time.Duration) {
	t.Helper()
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("got %s, want 429 (every slot taken)", r)
	}
	wantField(t, r, "RateLimit-Policy", fmt.Sprintf(`"%s-in-flight";q=%d;qu="concurrent-requests"`, route, inFlightMax))
	if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 || ra > int(ttl/time.Second) {
		t.Errorf("Retry-After = %q, want 1..%d seconds", r.header.Get("Retry-After"), int(ttl/time.Second))
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	var p struct {
		Type     string   `json:"type"`
		Status   int      `json:"status"`
		Violated []string `json:"violated-policies"`
	}
	if err := json.Unmarshal(r.body, &p); err != nil || !strings.HasSuffix(p.Type, "#max_in_flight") ||
		p.Status != http.StatusTooManyRequests || len(p.Violated) != 1 || p.Violated[0] != route+"-in-flight" {
		t.Errorf("problem body %q (%v), want type ...#max_in_flight, status 429, violated-policies [%s-in-flight]", r.body, err, route)
	}
}

// fill admits n requests of tenant on path, each held at the upstream
// until the test ends (or the route times out), one at a time.
func fill(t *testing.T, s *stack, path, tenant string, n int) []*call {
	t.Helper()
	calls := make([]*call, n)
	for i := range calls {
		calls[i] = admitHeld(t, s, path, tenant, uniq("h"), inFlightWait)
	}
	return calls
}

// admitHeld sends a request held at the upstream on hold, again while it
// is refused 429, until one reaches the upstream (within wait).
func admitHeld(t *testing.T, s *stack, path, tenant, hold string, wait time.Duration) *call {
	t.Helper()
	want := s.up.Running(tenant) + 1
	deadline := time.Now().Add(wait)
	for {
		c := s.start(t, inFlightGet(path, tenant, upstream.HeaderHold, hold))
		if reached(s, tenant, want, c) {
			return c
		}
		if c.err != nil || c.rep.status != http.StatusTooManyRequests {
			t.Fatalf("held request: got %s, %v; want it admitted or 429", c.rep, c.err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no slot freed within %v: %s", wait, c.rep)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// reached reports whether want requests of tenant run at the upstream
// before c ends.
func reached(s *stack, tenant string, want int, c *call) bool {
	for s.up.Running(tenant) < want {
		select {
		case <-c.done:
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
	return true
}

// waitAdmitted sends quick requests until one is admitted; it returns when.
func waitAdmitted(t *testing.T, s *stack, path, tenant string, deadline time.Time) time.Time {
	t.Helper()
	for {
		r := s.do(t, tenantGet(path, tenant))
		switch {
		case r.status == http.StatusOK:
			return time.Now()
		case r.status != http.StatusTooManyRequests:
			t.Fatalf("got %s, want 429 or 200", r)
		case time.Now().After(deadline):
			t.Fatalf("still refused at the deadline: %s", r)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitRunning waits until n requests of tenant run at the upstream.
func waitRunning(t *testing.T, s *stack, tenant string, n int) {
	t.Helper()
	deadline := time.Now().Add(inFlightWait)
	for s.up.Running(tenant) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests of %s running at the upstream after %v, want %d", s.up.Running(tenant), tenant, inFlightWait, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitDone waits until n of calls have ended and returns those.
func waitDone(t *testing.T, calls []*call, n int, wait time.Duration) []*call {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		var done []*call
		for _, c := range calls {
			select {
			case <-c.done:
				done = append(done, c)
			default:
			}
		}
		if len(done) >= n {
			return done
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d requests ended within %v, want %d", len(done), len(calls), wait, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
