package e2e

import (
	"bytes"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/extauthz/extauthz/test/e2e/upstream"
)

// wiring is one of the two supported Envoy wirings (DESIGN §4), reached
// through its route prefix in envoy/front-proxy.yaml.
type wiring struct {
	name string
	path string
}

var (
	wiringB = wiring{"ext_authz+ext_proc", "/orders"}
	wiringA = wiring{"ext_proc_only", "/payments"}
)

// leaseTTL is the idempotency lease of testdata/policy/http.yaml, and
// routeTimeout Envoy's upstream timeout on both routes of front-proxy.yaml.
const (
	leaseTTL     = 12 * time.Second
	routeTimeout = 10 * time.Second
)

var idempotencyScenarios = func() []scenario {
	var out []scenario
	for _, w := range []wiring{wiringB, wiringA} {
		out = append(out,
			scenario{w.name + "/replay_once", func(t *testing.T, s *stack) { testReplay(t, s, w) }},
			scenario{w.name + "/changed_body_422", func(t *testing.T, s *stack) { testChangedBody(t, s, w) }},
			scenario{w.name + "/missing_key_400", func(t *testing.T, s *stack) { testMissingKey(t, s, w) }},
			scenario{w.name + "/concurrent_duplicates", func(t *testing.T, s *stack) { testConcurrent(t, s, w) }},
			scenario{w.name + "/upstream_500_retry_executes", func(t *testing.T, s *stack) { testUpstream500(t, s, w) }},
			scenario{w.name + "/upstream_timeout_never_reruns", func(t *testing.T, s *stack) { testUpstreamTimeout(t, s, w) }},
			scenario{w.name + "/tenant_isolation", func(t *testing.T, s *stack) { testTenantIsolation(t, s, w) }},
			scenario{w.name + "/upstream_reset_never_reruns", func(t *testing.T, s *stack) { testUpstreamReset(t, s, w) }},
			scenario{w.name + "/binary_body_replayed_byte_for_byte", func(t *testing.T, s *stack) { testBinaryReplay(t, s, w) }},
			scenario{w.name + "/webhook_id_key_and_cache_lookup_marker", func(t *testing.T, s *stack) { testWebhookKey(t, s, w) }},
		)
	}
	return out
}()

// post is an idempotent POST of body with tenant and key ("" omits the key),
// plus extra headers for the upstream.
func post(w wiring, tenant, key, body string, extra ...string) req {
	h := map[string]string{"x-tenant-id": tenant, "content-type": "application/json"}
	if key != "" {
		h["idempotency-key"] = key
	}
	for i := 0; i+1 < len(extra); i += 2 {
		h[extra[i]] = extra[i+1]
	}
	return req{method: http.MethodPost, path: w.path + "/create", header: h, body: []byte(body)}
}

func wantProblem(t *testing.T, r reply, status int) {
	t.Helper()
	if r.status != status {
		t.Fatalf("got %s, want %d", r, status)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		t.Errorf("%d with Content-Type %q, want application/problem+json", status, ct)
	}
}

func wantReplayOf(t *testing.T, first, again reply) {
	t.Helper()
	if again.status != first.status || !bytes.Equal(again.body, first.body) {
		t.Fatalf("replay differs:\n first %s\n again %s", first, again)
	}
	if again.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay lacks Idempotent-Replayed: true: %s", again)
	}
	if again.header.Get("Content-Type") != first.header.Get("Content-Type") {
		t.Errorf("replayed Content-Type %q, want %q", again.header.Get("Content-Type"), first.header.Get("Content-Type"))
	}
	if again.header.Get("Set-Cookie") != "" {
		t.Errorf("replay repeats Set-Cookie (never allowed): %s", again)
	}
}

// POST twice with one key: the upstream runs once, the second reply is the
// first one (status and body) marked Idempotent-Replayed: true.
func testReplay(t *testing.T, s *stack, w wiring) {
	tenant, key := uniq("ti"), uniq("key")
	first := s.do(t, post(w, tenant, key, `{"amount":42}`, upstream.HeaderStatus, "201"))
	if first.status != http.StatusCreated || first.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: got %s, want a fresh 201", first)
	}
	again := s.do(t, post(w, tenant, key, `{"amount":42}`, upstream.HeaderStatus, "201"))
	wantReplayOf(t, first, again)
	if n := s.up.Executions(tenant, key); n != 1 {
		t.Errorf("upstream executed %d times, want 1", n)
	}
}

// A webhook receiver's route (key_header: webhook-id, x_cache_lookup:
// true): the sender's retry is replayed by its webhook-id, marked both
// ways; another delivery runs though it carries the same Idempotency-Key
// (which the upstream counts executions by, and extauthz ignores here);
// none without a webhook-id runs.
func testWebhookKey(t *testing.T, s *stack, w wiring) {
	tenant, key, id := uniq("ti"), uniq("key"), uniq("msg")
	hook := func(webhookID string) req {
		r := post(wiring{w.name, w.path + "/hooks"}, tenant, key, `{"type":"invoice.paid"}`, upstream.HeaderStatus, "201")
		if webhookID != "" {
			r.header["webhook-id"] = webhookID
		}
		return r
	}
	first := s.do(t, hook(id))
	if first.status != http.StatusCreated || first.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first delivery: got %s, want a fresh 201", first)
	}
	again := s.do(t, hook(id))
	wantReplayOf(t, first, again)
	if v := again.header.Values("X-Cache-Lookup"); len(v) != 1 || v[0] != "HIT-IDEMPOTENT" {
		t.Errorf("replay X-Cache-Lookup %q, want [HIT-IDEMPOTENT]", v)
	}
	if n := s.up.Executions(tenant, key); n != 1 {
		t.Fatalf("upstream executed %d times after a retry, want 1", n)
	}
	if r := s.do(t, hook(uniq("msg"))); r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("another delivery: got %s, want a fresh 201", r)
	}
	wantProblem(t, s.do(t, hook("")), http.StatusBadRequest)
	if n := s.up.Executions(tenant, key); n != 2 {
		t.Errorf("upstream executed %d times, want 2 (two deliveries)", n)
	}
}

// The same key with a different body is 422, and nothing runs again.
func testChangedBody(t *testing.T, s *stack, w wiring) {
	tenant, key := uniq("ti"), uniq("key")
	if r := s.do(t, post(w, tenant, key, `{"amount":42}`)); r.status != http.StatusOK {
		t.Fatalf("first: %s", r)
	}
	wantProblem(t, s.do(t, post(w, tenant, key, `{"amount":43}`)), http.StatusUnprocessableEntity)
	if n := s.up.Executions(tenant, key); n != 1 {
		t.Errorf("upstream executed %d times, want 1", n)
	}
}

// The route requires a key: a POST without one is 400 and never runs.
func testMissingKey(t *testing.T, s *stack, w wiring) {
	tenant := uniq("ti")
	wantProblem(t, s.do(t, post(w, tenant, "", `{}`)), http.StatusBadRequest)
	if n := s.up.Executions(tenant, ""); n != 0 {
		t.Errorf("upstream executed %d times, want 0", n)
	}
}

// 20 concurrent duplicates while the first is in flight: exactly one runs;
// every other gets 409 (with Retry-After) or, once the first completed,
// its replay.
func testConcurrent(t *testing.T, s *stack, w wiring) {
	tenant, key := uniq("ti"), uniq("key")
	r := post(w, tenant, key, `{"n":1}`, upstream.HeaderStatus, "201", upstream.HeaderDelay, "300ms")
	replies := make([]reply, 20)
	errs := make([]error, 20)
	var wg sync.WaitGroup
	for i := range replies {
		wg.Add(1)
		go func() { defer wg.Done(); replies[i], errs[i] = s.try(r) }()
	}
	wg.Wait()
	var fresh []reply
	conflicts, replays := 0, 0
	for i, rep := range replies {
		switch {
		case errs[i] != nil:
			t.Fatalf("request %d: %v", i, errs[i])
		case rep.status == http.StatusConflict:
			conflicts++
			if rep.header.Get("Retry-After") == "" {
				t.Errorf("409 without Retry-After: %s", rep)
			}
		case rep.header.Get("Idempotent-Replayed") == "true":
			replays++
		case rep.status == http.StatusCreated:
			fresh = append(fresh, rep)
		default:
			t.Errorf("request %d: unexpected %s", i, rep)
		}
	}
	if n := s.up.Executions(tenant, key); n != 1 || len(fresh) != 1 {
		t.Fatalf("upstream executed %d times, %d fresh replies; want exactly 1", n, len(fresh))
	}
	for _, rep := range replies {
		if rep.header.Get("Idempotent-Replayed") == "true" {
			wantReplayOf(t, fresh[0], rep)
		}
	}
	t.Logf("1 executed, %d conflicts, %d replays", conflicts, replays)
}

// An upstream 500 is not stored: the lease is released and a retry with
// the same key runs again.
func testUpstream500(t *testing.T, s *stack, w wiring) {
	tenant, key := uniq("ti"), uniq("key")
	if r := s.do(t, post(w, tenant, key, `{}`, upstream.HeaderStatus, "500")); r.status != http.StatusInternalServerError {
		t.Fatalf("first: got %s, want the upstream's 500", r)
	}
	r := s.do(t, post(w, tenant, key, `{}`, upstream.HeaderStatus, "201"))
	if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("retry: got %s, want a fresh 201", r)
	}
	if n := s.up.Executions(tenant, key); n != 2 {
		t.Errorf("upstream executed %d times, want 2", n)
	}
}

// An upstream that times out (Envoy answers 504) may still be running, so
// its write may happen: the key is completed as not replayable, and every
// retry, also after the lease TTL, gets the 409 not-replayable problem and
// never runs the write a second time.
func testUpstreamTimeout(t *testing.T, s *stack, w wiring) {
	tenant, key := uniq("ti"), uniq("key")
	r := s.do(t, post(w, tenant, key, `{}`, upstream.HeaderDelay, (routeTimeout+5*time.Second).String()))
	if r.status != http.StatusGatewayTimeout {
		t.Fatalf("first: got %s, want 504 after the route timeout", r)
	}
	wantNotReplayable := func(when string) {
		t.Helper()
		r := s.do(t, post(w, tenant, key, `{}`))
		if r.status != http.StatusConflict || !strings.Contains(string(r.body), "idempotency-response-not-replayable") {
			t.Fatalf("retry %s: got %s, want 409 idempotency-response-not-replayable", when, r)
		}
	}
	wantNotReplayable("right after the 504")
	time.Sleep(leaseTTL + time.Second)
	wantNotReplayable("after the lease TTL")
	if n := s.up.Executions(tenant, key); n != 1 {
		t.Errorf("upstream executed %d times, want 1", n)
	}
}

// An upstream that resets the connection, before its reply or in the
// middle of the body, may have done the work: the key is completed as not
// replayable (409, never a second run).
func testUpstreamReset(t *testing.T, s *stack, w wiring) {
	for _, when := range []string{"before", "mid-body"} {
		tenant, key := uniq("ti"), uniq("key")
		r, err := s.try(post(w, tenant, key, `{}`, upstream.HeaderReset, when))
		if err == nil && r.status < 500 {
			t.Fatalf("reset %s: got %s, want an error or a 5xx", when, r)
		}
		if r := s.do(t, post(w, tenant, key, `{}`)); r.status != http.StatusConflict || !strings.Contains(string(r.body), "idempotency-response-not-replayable") {
			t.Errorf("retry after a reset %s: got %s, want 409 idempotency-response-not-replayable", when, r)
		}
		if n := s.up.Executions(tenant, key); n != 1 {
			t.Errorf("reset %s: upstream executed %d times, want 1", when, n)
		}
	}
}

// Tenant B using tenant A's key gets its own execution, never A's reply;
// A's replay is still A's.
func testTenantIsolation(t *testing.T, s *stack, w wiring) {
	a, b, key := uniq("ta"), uniq("tb"), uniq("shared")
	ra := s.do(t, post(w, a, key, `{}`, upstream.HeaderStatus, "201"))
	rb := s.do(t, post(w, b, key, `{}`, upstream.HeaderStatus, "201"))
	if rb.status != http.StatusCreated || rb.header.Get("Idempotent-Replayed") != "" || bytes.Equal(ra.body, rb.body) {
		t.Fatalf("tenant B got %s, want its own fresh 201 (A got %s)", rb, ra)
	}
	if na, nb := s.up.Executions(a, key), s.up.Executions(b, key); na != 1 || nb != 1 {
		t.Errorf("executions A=%d B=%d, want 1 and 1", na, nb)
	}
	wantReplayOf(t, ra, s.do(t, post(w, a, key, `{}`, upstream.HeaderStatus, "201")))
}

// A binary (non-UTF-8) body is replayed byte for byte. ext_proc answers
// it (ImmediateResponse's body is bytes): in wiring (a) on the request body,
// in wiring (b) on the request headers, handed over by ext_authz, whose own
// reply body is a proto string and cannot carry it.
func testBinaryReplay(t *testing.T, s *stack, w wiring) {
	tenant, key := uniq("ti"), uniq("bin")
	r := post(w, tenant, key, "\x00\xff binary request \xfe", upstream.HeaderStatus, "201", upstream.HeaderBody, "binary")
	first := s.do(t, r)
	if first.status != http.StatusCreated || !bytes.HasPrefix(first.body, upstream.BinaryBody("")) {
		t.Fatalf("first: got %s, want 201 with the binary body", first)
	}
	wantReplayOf(t, first, s.do(t, r))
	if n := s.up.Executions(tenant, key); n != 1 {
		t.Errorf("upstream executed %d times, want 1", n)
	}
}
