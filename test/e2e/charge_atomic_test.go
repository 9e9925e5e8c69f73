package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// chargeAtomicScenarios are issue 36's attacks on the check and charge
// flow of charged limits: requests in flight at once, and a forged replay
// header.
var chargeAtomicScenarios = []scenario{
	{"login_parallel_guesses", testLoginParallelGuesses},
	{"tokens_concurrent_reservations", testTokensConcurrentReservations},
	{"ext_proc_alone_forged_replay_charged", testForgedReplayCharged},
}

// TestChargeForgedReplayHandWrittenConfig: finding 5 of issue 36 through
// an Envoy configured by hand: front-proxy.yaml without the strip of client
// x-extauthz-replay headers nor the route that sends them to the replay
// endpoint, and /payments's ext_proc-alone wiring reading no request body.
// A client that sends the header is still charged for every reply.
func TestChargeForgedReplayHandWrittenConfig(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOpts{replicas: 1, edit: func(src []byte) []byte { return handWrittenAlone(t, src) }})
	testForgedReplayCharged(t, s)
}

// handWrittenAlone rewrites front-proxy.yaml as issue 36's hand-written
// config: no strip of the replay headers, no replay route, /payments's
// body not sent to ext_proc.
func handWrittenAlone(t *testing.T, src []byte) []byte {
	s := string(src)
	for _, e := range [][2]string{
		{"              - remove: x-extauthz-replay\n              - remove: x-extauthz-replay-scope\n", "              - remove: x-not-a-replay-header\n"},
		{"                  - name: x-extauthz-replay\n                    present_match: true\n", "                  - name: x-no-replay-route\n                    present_match: true\n"},
	} {
		if !strings.Contains(s, e[0]) {
			t.Fatalf("front-proxy.yaml changed: %q is not there to edit", e[0])
		}
		s = strings.Replace(s, e[0], e[1], 1)
	}
	const buffered = "request_body_mode: BUFFERED"
	i := strings.Index(s, "- match: {prefix: /payments}")
	j := strings.Index(s[max(i, 0):], buffered)
	if i < 0 || j < 0 {
		t.Fatal("front-proxy.yaml changed: /payments's body mode is not where this test edits it")
	}
	j += i
	return []byte(s[:j] + "request_body_mode: NONE" + s[j+len(buffered):])
}

// status posts one JSON login without failing the test, for goroutines.
func (c *loginClient) status(path, user, password string) (int, error) {
	body, _ := json.Marshal(map[string]string{"username": user, "password": password})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hr, err := c.s.newRequest(req{method: http.MethodPost, path: path, body: body, header: map[string]string{"content-type": "application/json"}})
	if err != nil {
		return 0, err
	}
	resp, err := c.http.Do(hr.WithContext(ctx))
	if err != nil {
		return 0, err
	}
	rep, err := readReply(resp)
	return rep.status, err
}

// 12 wrong passwords at once from one address against testdata's login
// limit of 5 per address: each check reserves its hit with the check, so
// at most 5 reach the upstream (401); the others are refused (429), over
// two replicas sharing Redis.
func testLoginParallelGuesses(t *testing.T, s *stack) {
	c := s.loginFrom(t, "127.0.36.1")
	user := uniq("guess")
	statuses := make([]int, 12)
	errs := make([]error, 12)
	var wg sync.WaitGroup
	for i := range statuses {
		wg.Go(func() { statuses[i], errs[i] = c.status("/login", user, wrongPassword) })
	}
	wg.Wait()
	reached := 0
	for i, st := range statuses {
		switch {
		case errs[i] != nil:
			t.Fatalf("guess %d: %v", i+1, errs[i])
		case st == http.StatusUnauthorized:
			reached++
		case st != http.StatusTooManyRequests:
			t.Fatalf("guess %d: got %d, want 401 or 429", i+1, st)
		}
	}
	if reached > 5 {
		t.Errorf("%d of 12 parallel wrong passwords reached the upstream, limit 5", reached)
	}
}

// 20 requests at once, each reserving its real cost (x-max-tokens: 300)
// with 400 of 1000 left (testdata's llm-reserve route): exactly 2 are
// admitted, whichever of the two replicas checks each.
func testTokensConcurrentReservations(t *testing.T, s *stack) {
	tenant := uniq("tres")
	reserving := func(cost int) req {
		r := llmGet("/llm/reserve", tenant, cost, "header")
		r.header["x-max-tokens"] = strconv.Itoa(cost)
		return r
	}
	if rep := s.do(t, reserving(600)); rep.status != http.StatusOK {
		t.Fatalf("first request: got %s, want 200", rep)
	}
	var calls []*call
	for range 20 {
		calls = append(calls, s.start(t, reserving(300)))
	}
	admitted := 0
	for i, c := range calls {
		<-c.done
		switch {
		case c.err != nil:
			t.Fatalf("request %d: %v", i+1, c.err)
		case c.rep.status == http.StatusOK:
			admitted++
		case c.rep.status != http.StatusTooManyRequests:
			t.Fatalf("request %d: got %s, want 200 or 429", i+1, c.rep)
		}
	}
	if admitted != 2 {
		t.Errorf("%d of 20 concurrent reservations of 300 admitted with 400 left, want exactly 2", admitted)
	}
}

// Wiring (a), ext_proc alone (/payments/charged): a request carrying a
// client-made x-extauthz-replay is no replay, and its cost is charged:
// four replies of 300 spend the budget of 1000 and the fifth is refused.
// (front-proxy.yaml also strips the header; extauthz must not need it:
// TestChargeForgedReplayHandWrittenConfig.)
func testForgedReplayCharged(t *testing.T, s *stack) {
	tenant := uniq("tforge")
	r := llmGet("/payments/charged", tenant, 300, "header")
	r.header["x-extauthz-replay"] = "forged"
	r.header["x-extauthz-replay-scope"] = "forged"
	if n := spendTokens(t, s, r); n != 4 {
		t.Fatalf("admitted %d forged replays of 300 on a budget of 1000, want 4 (each charged)", n)
	}
	if n := s.up.Executions(tenant, ""); n != 4 {
		t.Errorf("upstream executed %d requests, want 4", n)
	}
}
