package authz

import (
	"encoding/json"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/extauthz/extauthz/pkg/idempotency"
)

// A slow upstream keeps its key: the lease is renewed every TTL/3 while the
// stream waits, so a duplicate after the original TTL still gets 409.
func TestExtProcRenewsTheLeaseOfASlowUpstream(t *testing.T) {
	e := startIdem(t, idemPolicy)
	// The route's requests take longer than any lease: a duplicate's
	// Retry-After is then the lease's remaining time, which shows renewals.
	e.latency.Observe("orders", time.Hour)
	s, _ := e.postA(t, "/orders/1", "acme", "slow", []byte("{}"))
	e.clock.Advance(25 * time.Second)
	e.ticks <- e.clock.Now() // renew at t0+25s: the lease now ends at t0+55s
	// Wait for that renewal before moving the clock: a renewal still in
	// flight when the clock moves would extend the lease from t0+50s.
	// Unrenewed, a duplicate now sees 5s left; renewed, 30s.
	waitRetryAfter(t, func() []string {
		_, ir := e.postA(t, "/orders/1", "acme", "slow", []byte("{}"))
		return irHeader(ir, "retry-after")
	}, "30")
	e.clock.Advance(25 * time.Second)
	_, ir := e.postA(t, "/orders/1", "acme", "slow", []byte("{}"))
	wantProblemIR(t, ir, 409, ProblemInProgress)
	if got := irHeader(ir, "retry-after"); len(got) != 1 || got[0] != "5" {
		t.Errorf("Retry-After %v, want [5]", got)
	}
	s.upstream(201, []byte("slow but done"), viaUpstream, 0)
	_, ir = e.postA(t, "/orders/1", "acme", "slow", []byte("{}"))
	wantReplayIR(t, ir, 201, []byte("slow but done"))
}

// waitRetryAfter polls dup until it answers Retry-After want (a goroutine
// of the server reaching a state), failing after 10s.
func waitRetryAfter(t *testing.T, dup func() []string, want string) {
	t.Helper()
	var got []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if got = dup(); len(got) == 1 && got[0] == want {
			return
		}
	}
	t.Fatalf("Retry-After %v, want [%s]", got, want)
}

// Fencing through ext_proc: a request whose lease expired and was taken by
// a retry cannot store its late response; the retry's response is kept.
func TestExtProcFencesAStaleOwner(t *testing.T) {
	e := startIdem(t, idemPolicy)
	stale, _ := e.postA(t, "/orders/1", "acme", "k", []byte("{}"))
	e.clock.Advance(31 * time.Second) // past the 30s lease, never renewed
	fresh, ir := e.postA(t, "/orders/1", "acme", "k", []byte("{}"))
	if ir != nil {
		t.Fatalf("retry after the lease TTL answered %d, want it to run", ir.GetStatus().GetCode())
	}
	stale.upstream(201, []byte("stale"), viaUpstream, 0)
	if got := e.event(apiExtProc, idempotency.EventLeaseLost); got != 1 {
		t.Fatalf("lease_lost = %v, want 1", got)
	}
	fresh.upstream(201, []byte("fresh"), viaUpstream, 0)
	_, ir = e.postA(t, "/orders/1", "acme", "k", []byte("{}"))
	wantReplayIR(t, ir, 201, []byte("fresh"))
}

// A renewal that finds the lease taken over stops, and the stale owner
// writes nothing afterwards.
func TestExtProcRenewalDetectsTakeover(t *testing.T) {
	e := startIdem(t, idemPolicy)
	stale, _ := e.postA(t, "/orders/1", "acme", "k", []byte("{}"))
	e.clock.Advance(31 * time.Second)
	fresh, _ := e.postA(t, "/orders/1", "acme", "k", []byte("{}"))
	// Two ticks, taken by whichever renewers are waiting: the stale one
	// finds the lease gone (lease_lost) or, if it got none, its release
	// does. Either way it is counted once and deletes nothing.
	e.ticks <- e.clock.Now()
	e.ticks <- e.clock.Now()
	stale.upstream(500, []byte("stale"), viaUpstream, 0)
	fresh.upstream(201, []byte("fresh"), viaUpstream, 0)
	if got := e.event(apiExtProc, idempotency.EventLeaseLost); got != 1 {
		t.Errorf("lease_lost = %v, want 1 (the stale renewer, counted once)", got)
	}
	if got := e.event(apiExtProc, idempotency.EventReleased); got != 0 {
		t.Errorf("released = %v: the stale owner released the fresh lease", got)
	}
	_, ir := e.postA(t, "/orders/1", "acme", "k", []byte("{}"))
	wantReplayIR(t, ir, 201, []byte("fresh"))
}

// Store down: a fail-open route admits without a lease (nothing stored), a
// fail-closed route answers 503.
func TestExtProcStoreDown(t *testing.T) {
	e := startIdem(t, idemPolicy)
	e.store.fail.Store(true)
	s, ir := e.postA(t, "/orders/1", "acme", "k", []byte("{}"))
	if ir != nil {
		t.Fatalf("fail-open route answered %d", ir.GetStatus().GetCode())
	}
	s.upstream(201, []byte("unguarded"), viaUpstream, 0)
	_, ir = e.postA(t, "/strict", "acme", "k", []byte("{}"))
	wantProblemIR(t, ir, 503, ProblemUnavailable)
	e.store.fail.Store(false)
	if _, ir = e.postA(t, "/orders/1", "acme", "k", []byte("{}")); ir != nil {
		t.Fatal("a response was stored without a lease")
	}
	if e.event(apiExtProc, idempotency.EventFailOpen) != 1 || e.event(apiExtProc, idempotency.EventUnavailable) != 1 {
		t.Errorf("fail_open %v unavailable %v, want 1 and 1",
			e.event(apiExtProc, idempotency.EventFailOpen), e.event(apiExtProc, idempotency.EventUnavailable))
	}
}

// Tenant A's key never replays to tenant B, whatever the strings: every
// (tenant, key) pair below gets its own execution and its own replay.
func TestExtProcTenantIsolation(t *testing.T) {
	e := startIdem(t, idemPolicy)
	pairs := [][2]string{
		{"a|b", "c"}, {"a", "b|c"}, {"a", "b%7Cc"}, {"a%7Cb", "c"}, {"a}", "{b"}, {"a", "}{b"},
		{"a:idem:{x", "y}"}, {"a", `x\`}, {"A", "b|c"}, {"~p~x", "k"}, {"public", "k2"}, {"a#", "x"},
	}
	for i, p := range pairs {
		s, ir := e.postA(t, "/orders/1", p[0], `"`+escapeSF(p[1])+`"`, []byte("{}"))
		if ir != nil {
			t.Fatalf("pair %q: answered %d, want its own execution", p, ir.GetStatus().GetCode())
		}
		s.upstream(201, []byte{byte('A' + i)}, viaUpstream, 0)
	}
	for i, p := range pairs {
		_, ir := e.postA(t, "/orders/1", p[0], `"`+escapeSF(p[1])+`"`, []byte("{}"))
		wantReplayIR(t, ir, 201, []byte{byte('A' + i)})
	}
	// No identity is never the shared scope of the old default ("public"):
	// the keyed request is answered 401.
	_, ir := e.postA(t, "/orders/1", "", "k", []byte("{}"))
	wantProblemIR(t, ir, 401, ProblemIdentityMissing)
}

func escapeSF(s string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			out = append(out, '\\')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// wantNotReplayable checks a retry got the not-replayable problem carrying
// the first reply's status (0: unknown, left out).
func wantNotReplayable(t *testing.T, ir *extprocv3.ImmediateResponse, status int) {
	t.Helper()
	wantProblemIR(t, ir, 409, ProblemNotReplayable)
	var p Problem
	if err := json.Unmarshal(ir.GetBody(), &p); err != nil || p.OriginalStatus != status {
		t.Errorf("original-status %d (%v), want %d", p.OriginalStatus, err, status)
	}
	if ra := irHeader(ir, "retry-after"); len(ra) != 0 {
		t.Errorf("Retry-After %v on a problem no retry can solve", ra)
	}
}
