package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/test/e2e/upstream"
)

// largeReplyScenarios: replies larger than the route's max_body_bytes
// (1 MiB here) with no object storage configured.
var largeReplyScenarios = func() []scenario {
	var out []scenario
	for _, w := range []wiring{wiringB, wiringA} {
		out = append(out,
			scenario{w.name + "/2MiB_delivered_whole_never_rerun", func(t *testing.T, s *stack) { testLargeReplyNotKept(t, s, w) }},
			scenario{w.name + "/client_gone_mid_reply_never_rerun", func(t *testing.T, s *stack) { testClientGoneMidReply(t, s, w) }},
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

// TestLargeReplyMemory streams a 20 MiB reply through each wiring on its
// own stack and logs the peak resident memory (VmHWM) of Envoy and of each
// extauthz replica before and after: the figures in docs/idempotency.md.
// It asserts only behaviour (the whole body delivered, one execution);
// memory is reported, never asserted. Rerun:
//
//	ENVOY_BIN=/opt/envoy-venv/bin/envoy go test -count=1 -v -run TestLargeReplyMemory ./test/e2e/
func TestLargeReplyMemory(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOpts{})
	const size = 20 << 20
	report := func(when string) {
		line := "VmHWM " + when + ": envoy " + peakRSS(s.envoy)
		for i, r := range s.replicas {
			line += ", extauthz#" + strconv.Itoa(i) + " " + peakRSS(r.proc)
		}
		t.Log(line)
	}
	report("before")
	for _, w := range []wiring{wiringB, wiringA} {
		tenant, key := uniq("ti"), uniq("huge")
		start := time.Now()
		r := s.do(t, post(w, tenant, key, `{}`, upstream.HeaderStatus, "201", upstream.HeaderBodySize, strconv.Itoa(size)))
		elapsed := time.Since(start)
		sum := sha256.Sum256(r.body)
		if r.status != http.StatusCreated || len(r.body) != size || hex.EncodeToString(sum[:]) != r.header.Get(upstream.HeaderBodySHA) {
			t.Fatalf("%s: %d with %d bytes, want 201 with the upstream's %d bytes", w.name, r.status, len(r.body), size)
		}
		if n := s.up.Executions(tenant, key); n != 1 {
			t.Errorf("%s: upstream executed %d times, want 1", w.name, n)
		}
		t.Logf("%s: %d MiB delivered in %v (%.0f MB/s through Envoy and ext_proc)", w.name, size>>20, elapsed.Round(time.Millisecond), float64(size)/1e6/elapsed.Seconds())
		report("after " + w.name)
	}
}

// peakRSS reads a process's VmHWM from /proc (Linux); "?" elsewhere.
func peakRSS(p *proc) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.cmd.Process.Pid) + "/status")
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			return strings.Join(strings.Fields(strings.TrimPrefix(l, "VmHWM:")), " ")
		}
	}
	return "?"
}

// A client that hangs up in the middle of a large reply: the upstream has
// run, Envoy resets the stream and ends ext_proc's stream, and a retry
// never runs the write again. (With no blob store the key is completed as
// not replayable once the reply passes max_body_bytes, before the hang-up;
// the unit test TestExtProcAloneUnfinishedStreamsAreNotKept covers a
// stream that ends before its reply was judged.)
func testClientGoneMidReply(t *testing.T, s *stack, w wiring) {
	tenant, key := uniq("ti"), uniq("gone")
	r := post(w, tenant, key, `{}`, upstream.HeaderStatus, "201", upstream.HeaderBodySize, strconv.Itoa(20<<20))
	hr, err := s.newRequest(r)
	if err != nil {
		t.Fatal(err)
	}
	// A client of its own, so that hanging up closes only this connection.
	c := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	resp, err := c.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 1<<20)); err != nil {
		t.Fatalf("reading the first MiB: %v", err)
	}
	resp.Body.Close() // hang up with most of the body unread
	c.CloseIdleConnections()
	deadline := time.Now().Add(10 * time.Second)
	for {
		again := s.do(t, post(w, tenant, key, `{}`))
		if again.status == http.StatusConflict && strings.Contains(string(again.body), "idempotency-response-not-replayable") {
			break
		}
		// Until Envoy has torn the stream down the key is in progress (409).
		if again.status != http.StatusConflict || time.Now().After(deadline) {
			t.Fatalf("retry: %s, want 409 in progress, then 409 not replayable", again)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := s.up.Executions(tenant, key); n != 1 {
		t.Errorf("upstream executed %d times, want 1", n)
	}
}
