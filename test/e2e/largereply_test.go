package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/extauthz/extauthz/test/e2e/upstream"
)

// largeReplyScenarios: replies larger than the route's max_body_bytes
// (1 MiB here) with no object storage configured.
var largeReplyScenarios = func() []scenario {
	var out []scenario
	for _, w := range []wiring{wiringB, wiringA} {
		out = append(out,
			scenario{w.name + "/2MiB_delivered_whole_never_rerun", func(t *testing.T, s *stack) { testLargeReplyNotKept(t, s, w) }},
		)
	}
	return out
}()

// A 2 MiB reply streams through Envoy (ext_proc STREAMED) whole to the
// client on the first call; the upstream ran once. extauthz cannot keep it
// (no blob store), so the key is completed as not replayable: a retry gets
// the documented 409 problem and never runs the write again.
func testLargeReplyNotKept(t *testing.T, s *stack, w wiring) {
	const size = 2 << 20
	tenant, key := uniq("ti"), uniq("big")
	big := func() req {
		return post(w, tenant, key, `{}`, upstream.HeaderStatus, "201", upstream.HeaderBodySize, strconv.Itoa(size))
	}
	first := s.do(t, big())
	sum := sha256.Sum256(first.body)
	if first.status != http.StatusCreated || len(first.body) != size || hex.EncodeToString(sum[:]) != first.header.Get(upstream.HeaderBodySHA) {
		t.Fatalf("first: %d with %d bytes (sha256 match %v), want 201 with the upstream's %d bytes",
			first.status, len(first.body), hex.EncodeToString(sum[:]) == first.header.Get(upstream.HeaderBodySHA), size)
	}
	for range 2 {
		again := s.do(t, big())
		wantProblem(t, again, http.StatusConflict)
		if !strings.Contains(string(again.body), "idempotency-response-not-replayable") || !strings.Contains(string(again.body), `"original-status":201`) {
			t.Errorf("retry: %s, want the not-replayable problem with original-status 201", again)
		}
	}
	if n := s.up.Executions(tenant, key); n != 1 {
		t.Errorf("upstream executed %d times, want 1", n)
	}
}
