package authz

import (
	"strings"
	"testing"

	"github.com/extauthz/extauthz/pkg/idempotency"
)

// The replay endpoint serves a ticket only to the caller it was issued to:
// with the scope proof the same decision set. Another tenant's proof, a
// proof of the wrong form or none at all is 403 without the body, counted
// as identity_mismatch under the ticket's route.
func TestReplayEndpointChecksTheCallersIdentity(t *testing.T) {
	e := startReplay(t, true)
	e.storeLargeFor(t, "acme", "/orders/1", "k1", []byte("{}"), []byte("acme's reply"))
	e.storeLargeFor(t, "globex", "/orders/1", "k1", []byte("{}"), []byte("globex's reply"))
	acme := markOf(t, e.post(t, "/orders/1", "acme", "k1", []byte("{}")))
	globex := markOf(t, e.post(t, "/orders/1", "globex", "k1", []byte("{}")))
	if acme.scope == globex.scope || strings.Contains(acme.scope, "acme") {
		t.Fatalf("scope proofs %q and %q: want distinct and opaque", acme.scope, globex.scope)
	}

	cases := map[string]replayMark{
		"globex's identity":  {ticket: acme.ticket, scope: globex.scope},
		"no identity":        {ticket: acme.ticket},
		"the scope in clear": {ticket: acme.ticket, scope: "acme"},
		"another ticket's":   {ticket: acme.ticket, scope: globex.ticket},
	}
	for name, m := range cases {
		r, b, err := e.fetch(t, m, "k1")
		if err != nil || r.StatusCode != 403 || strings.Contains(string(b), "reply") || !strings.Contains(string(b), ProblemReplayForbidden) {
			t.Errorf("%s: %v %v %q, want 403 %s without the body", name, r.StatusCode, err, b, ProblemReplayForbidden)
		}
	}
	if n := e.events.RouteValue(apiReplay, "orders", EventReplayIdentity); n != float64(len(cases)) {
		t.Errorf("identity_mismatch on route orders = %v, want %d", n, len(cases))
	}

	for _, c := range []struct {
		m    replayMark
		want string
	}{{acme, "acme's reply"}, {globex, "globex's reply"}} {
		r, b, err := e.fetch(t, c.m, "k1")
		if err != nil || r.StatusCode != 201 || string(b) != c.want {
			t.Errorf("own identity: %v %v %q, want 201 %q", r.StatusCode, err, b, c.want)
		}
	}
	if n := e.event(apiReplay, idempotency.EventReplayed); n != 2 {
		t.Errorf("replayed = %v, want 2", n)
	}
}

// A repeated proof header is refused, as a repeated ticket is: Envoy
// overwrites both, so two copies mean one came from elsewhere.
func TestReplayEndpointRefusesARepeatedProof(t *testing.T) {
	e := startReplay(t, true)
	e.storeLarge(t, "/orders/1", "k1", []byte("{}"), []byte("reply"))
	m := markOf(t, e.post(t, "/orders/1", "acme", "k1", []byte("{}")))
	r, _, err := e.fetchWith(t, m, "k1", HeaderReplayScope, m.scope)
	if err != nil || r.StatusCode != 403 {
		t.Errorf("two proofs: %v %v, want 403", r.StatusCode, err)
	}
}
