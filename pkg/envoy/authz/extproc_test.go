package authz

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/extauthz/extauthz/pkg/idempotency"
)

const buffered = filterv3.ProcessingMode_BUFFERED

// postA drives the request side of wiring (a): headers, then the whole
// body. It returns the stream and the ImmediateResponse (nil: the request
// goes upstream).
func (e *idemEnv) postA(t *testing.T, path, tenant, key string, body []byte, extra ...string) (*stream, *extprocv3.ImmediateResponse) {
	t.Helper()
	s := e.open(t)
	kv := append([]string{":method", "POST", ":path", path, "x-tenant-id", tenant, "content-type", "application/json"}, extra...)
	if key != "" {
		kv = append(kv, "idempotency-key", key)
	}
	r := s.send(reqHeaders(buffered, false, nil, kv...))
	if ir := immediateOf(r); ir != nil {
		return s, ir
	}
	if r.GetRequestHeaders() == nil {
		t.Fatalf("request headers answered %v", r)
	}
	r = s.send(reqBody(body))
	if ir := immediateOf(r); ir != nil {
		return s, ir
	}
	if r.GetRequestBody() == nil {
		t.Fatalf("request body answered %v", r)
	}
	return s, nil
}

// upstream drives the response side: headers (with the response
// attributes) and, when body is not nil, the whole body; then the stream ends.
func (s *stream) upstream(status int, body []byte, details string, flags float64, kv ...string) {
	s.t.Helper()
	kv = append([]string{":status", strconv.Itoa(status)}, kv...)
	r := s.send(respHeaders(respAttrs(details, flags), body == nil, kv...))
	if r.GetResponseHeaders() == nil {
		s.t.Fatalf("response headers answered %v", r)
	}
	if body != nil {
		if r := s.send(respBody(body)); r.GetResponseBody() == nil {
			s.t.Fatalf("response body answered %v", r)
		}
	}
	s.close()
}

// wantProblemIR checks an ImmediateResponse is a problem of type typ.
func wantProblemIR(t *testing.T, ir *extprocv3.ImmediateResponse, status int, typ string) {
	t.Helper()
	if ir == nil {
		t.Fatalf("request continued, want %d %s", status, typ)
	}
	if int(ir.GetStatus().GetCode()) != status {
		t.Fatalf("status %d, want %d (body %s)", ir.GetStatus().GetCode(), status, ir.GetBody())
	}
	if ct := irHeader(ir, "content-type"); len(ct) != 1 || ct[0] != ContentTypeProblem {
		t.Errorf("content-type %v, want %s", ct, ContentTypeProblem)
	}
	var p Problem
	if err := json.Unmarshal(ir.GetBody(), &p); err != nil || p.Type != typ || p.Status != status {
		t.Errorf("problem %s (%v), want type %s status %d", ir.GetBody(), err, typ, status)
	}
}

func wantReplayIR(t *testing.T, ir *extprocv3.ImmediateResponse, status int, body []byte) {
	t.Helper()
	if ir == nil {
		t.Fatal("request continued, want a replay")
	}
	if int(ir.GetStatus().GetCode()) != status || !bytes.Equal(ir.GetBody(), body) {
		t.Fatalf("replayed %d %q, want %d %q", ir.GetStatus().GetCode(), ir.GetBody(), status, body)
	}
	if v := irHeader(ir, HeaderIdempotentReplayed); len(v) != 1 || v[0] != "true" {
		t.Errorf("Idempotent-Replayed %v, want [true]", v)
	}
}

// Rows "key new" and "same key, completed": the upstream runs once, the
// retry gets the stored status, allow-listed headers and body.
func TestExtProcAloneStoresAndReplays(t *testing.T) {
	e := startIdem(t, idemPolicy)
	body := []byte(`{"amount":42}`)
	s, ir := e.postA(t, "/orders/1", "acme", "k1", body)
	if ir != nil {
		t.Fatalf("first request answered %d, want it to go upstream", ir.GetStatus().GetCode())
	}
	s.upstream(201, []byte(`{"id":7}`), viaUpstream, 0, "content-type", "application/json",
		"location", "/orders/7", "set-cookie", "session=secret", "x-custom", "a", "x-custom", "b",
		"date", "Mon, 01 Jan 2024 00:00:00 GMT", "x-unlisted", "no")
	if e.event(apiExtProc, idempotency.EventStored) != 1 {
		t.Fatalf("stored = %v, want 1", e.event(apiExtProc, idempotency.EventStored))
	}
	_, ir = e.postA(t, "/orders/1", "acme", `"k1"`, body) // the sf-string form is the same key
	wantReplayIR(t, ir, 201, []byte(`{"id":7}`))
	for name, want := range map[string][]string{
		"content-type": {"application/json"}, "location": {"/orders/7"}, "x-custom": {"a", "b"},
		"set-cookie": nil, "date": nil, "x-unlisted": nil,
	} {
		if got := irHeader(ir, name); len(got) != len(want) || (len(want) > 0 && (got[0] != want[0] || got[len(got)-1] != want[len(want)-1])) {
			t.Errorf("replayed %s = %v, want %v", name, got, want)
		}
	}
}

// Row "key missing or malformed": 400 problem+json on the request headers,
// before anything runs.
func TestExtProcAloneRejectsMissingAndMalformedKeys(t *testing.T) {
	e := startIdem(t, idemPolicy)
	_, ir := e.postA(t, "/orders/1", "acme", "", []byte("{}"))
	wantProblemIR(t, ir, 400, ProblemKeyMissing)
	for _, bad := range []string{"two words", `"unterminated`, string(bytes.Repeat([]byte("k"), 256)), "a,b"} {
		_, ir = e.postA(t, "/orders/1", "acme", bad, []byte("{}"))
		wantProblemIR(t, ir, 400, ProblemKeyMalformed)
	}
	// A key on an optional route without one is not needed.
	if _, ir = e.postA(t, "/optional", "acme", "", []byte("{}")); ir != nil {
		t.Fatalf("optional route without a key answered %d", ir.GetStatus().GetCode())
	}
	if e.event(apiExtProc, idempotency.EventMissing) != 1 || e.event(apiExtProc, idempotency.EventMalformed) != 4 {
		t.Errorf("missing %v malformed %v, want 1 and 4", e.event(apiExtProc, idempotency.EventMissing), e.event(apiExtProc, idempotency.EventMalformed))
	}
}

// Rows "in flight" and "different fingerprint".
func TestExtProcAloneConflictAndMismatch(t *testing.T) {
	e := startIdem(t, idemPolicy)
	first, ir := e.postA(t, "/orders/1", "acme", "k", []byte(`{"a":1}`), "x-plan", "gold")
	if ir != nil {
		t.Fatal("first request did not go upstream")
	}
	e.clock.Advance(10 * time.Second)
	_, ir = e.postA(t, "/orders/1", "acme", "k", []byte(`{"a":1}`), "x-plan", "gold")
	wantProblemIR(t, ir, 409, ProblemInProgress)
	if got := irHeader(ir, "retry-after"); len(got) != 1 || got[0] != "2" {
		t.Errorf("Retry-After %v, want [2] (no request of the route finished yet: the default)", got)
	}
	for _, other := range []struct {
		body []byte
		plan string
	}{{[]byte(`{"a":2}`), "gold"}, {[]byte(`{"a":1}`), "free"}} { // another body; another fingerprint header
		_, ir = e.postA(t, "/orders/1", "acme", "k", other.body, "x-plan", other.plan)
		wantProblemIR(t, ir, 422, ProblemKeyReused)
	}
	_, ir = e.postA(t, "/orders/2", "acme", "k", []byte(`{"a":1}`), "x-plan", "gold")
	wantProblemIR(t, ir, 422, ProblemKeyReused) // same key, other path
	first.upstream(200, []byte("done"), viaUpstream, 0)
	_, ir = e.postA(t, "/orders/1", "acme", "k", []byte(`{"a":1}`), "x-plan", "gold")
	wantReplayIR(t, ir, 200, []byte("done"))
}

// Rows "upstream replied 5xx / router 503 connect failure: released" and
// "the upstream may have acted: not kept" (a retry gets the not-replayable
// problem with the status, never a second run), plus local replies of
// later filters.
func TestExtProcAloneSettlesEachOutcome(t *testing.T) {
	tests := []struct {
		name    string
		status  int
		body    []byte
		details string
		flags   float64
		want    string // released, not kept, stored
	}{
		{"upstream 500", 500, []byte("oops"), viaUpstream, 0, "released"},
		{"upstream 503", 503, nil, viaUpstream, 0, "released"},
		{"upstream 400 (4xx not stored)", 400, []byte("bad"), viaUpstream, 0, "released"},
		{"upstream 409 (opted in)", 409, []byte("exists"), viaUpstream, 0, "stored"},
		{"upstream 204", 204, nil, viaUpstream, 0, "stored"},
		{"router 503 connect failure", 503, []byte("upstream connect error"), "upstream_reset_before_response_started{connection_failure}", flag("UF"), "released"},
		{"router 503 after retries", 503, []byte("x"), "upstream_reset_before_response_started{connection_failure}", flag("UF", "URX"), "released"},
		{"router 503 no healthy upstream", 503, []byte("no healthy upstream"), "no_healthy_upstream", flag("UH"), "released"},
		{"local rate limit after ext_proc", 429, []byte("rl"), "local_rate_limited", flag("RL"), "released"},
		{"router 504 upstream timeout", 504, []byte("upstream request timeout"), "upstream_response_timeout", flag("UT"), "not kept"},
		{"reset before headers", 503, []byte("reset"), "upstream_reset_before_response_started{remote_reset}", flag("UR"), "not kept"},
		{"retries exhausted on resets", 503, []byte("x"), "upstream_reset_before_response_started{remote_reset}", flag("URX", "UR"), "not kept"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := startIdem(t, idemPolicy)
			s, ir := e.postA(t, "/orders/1", "acme", "k", []byte("{}"))
			if ir != nil {
				t.Fatal("did not go upstream")
			}
			s.upstream(tc.status, tc.body, tc.details, tc.flags)
			_, ir = e.postA(t, "/orders/1", "acme", "k", []byte("{}"))
			switch tc.want {
			case "released":
				if ir != nil {
					t.Fatalf("retry answered %d, want it to run again (lease released)", ir.GetStatus().GetCode())
				}
			case "not kept":
				wantNotReplayable(t, ir, tc.status)
				e.clock.Advance(time.Hour - time.Second) // past the lease TTL, within the record TTL
				_, ir = e.postA(t, "/orders/1", "acme", "k", []byte("{}"))
				wantNotReplayable(t, ir, tc.status)
			case "stored":
				wantReplayIR(t, ir, tc.status, tc.body)
			}
		})
	}
}

// Row "outcome unknown": reset mid-body (no body with end_of_stream) and a
// stream that ends before any response (client gone, ext_proc timeout)
// complete the key as not replayable: the upstream may have acted.
func TestExtProcAloneUnfinishedStreamsAreNotKept(t *testing.T) {
	e := startIdem(t, idemPolicy)
	s, _ := e.postA(t, "/orders/1", "acme", "reset", []byte("{}"))
	s.send(respHeaders(respAttrs(viaUpstream, 0), false, ":status", "200"))
	s.close() // reset mid-body: Envoy never sends the body
	s, _ = e.postA(t, "/orders/1", "acme", "gone", []byte("{}"))
	s.close() // client gone before the response
	for k, status := range map[string]int{"reset": 200, "gone": 0} {
		_, ir := e.postA(t, "/orders/1", "acme", k, []byte("{}"))
		wantNotReplayable(t, ir, status)
	}
	if got := e.event(apiExtProc, idempotency.EventNotKept); got != 2 {
		t.Errorf("not_kept = %v, want 2", got)
	}
}

// A response body over max_body_bytes (no blob store) passes through, and
// the key is completed as not replayable (a retry never runs again),
// counted as too_large.
func TestExtProcAloneTooLargeIsNotKept(t *testing.T) {
	e := startIdem(t, idemPolicy)
	big := bytes.Repeat([]byte("x"), 4097)
	s, _ := e.postA(t, "/orders/1", "acme", "big", []byte("{}"))
	s.upstream(200, big, viaUpstream, 0)
	s, _ = e.postA(t, "/orders/1", "acme", "declared", []byte("{}"))
	s.upstream(200, nil, viaUpstream, 0, "content-length", "5000")
	for _, k := range []string{"big", "declared"} {
		_, ir := e.postA(t, "/orders/1", "acme", k, []byte("{}"))
		wantNotReplayable(t, ir, 200)
	}
	if got := e.event(apiExtProc, idempotency.EventTooLarge); got != 2 {
		t.Errorf("too_large = %v, want 2", got)
	}
}

// A binary body is stored and replayed byte for byte through ext_proc.
func TestExtProcAloneReplaysBinaryBodies(t *testing.T) {
	e := startIdem(t, idemPolicy)
	bin := []byte{0, 0xff, 0xfe, 0x80, 'P', 'N', 'G', 0x1f, 0x8b, 0}
	reqBin := []byte{0xc3, 0x28, 0xa0, 0xa1}
	s, _ := e.postA(t, "/orders/1", "acme", "bin", reqBin)
	s.upstream(201, bin, viaUpstream, 0, "content-type", "application/octet-stream")
	_, ir := e.postA(t, "/orders/1", "acme", "bin", reqBin)
	wantReplayIR(t, ir, 201, bin)
}

// A bodiless request (end_of_stream on the headers) is decided at once.
func TestExtProcAloneBodilessRequest(t *testing.T) {
	e := startIdem(t, idemPolicy)
	open := func() (*stream, *extprocv3.ProcessingResponse) {
		s := e.open(t)
		return s, s.send(reqHeaders(buffered, true, nil, ":method", "POST", ":path", "/orders/x", "idempotency-key", "nobody", "x-tenant-id", "t"))
	}
	s, r := open()
	if r.GetRequestHeaders() == nil {
		t.Fatalf("first bodiless request answered %v", r)
	}
	s.upstream(200, []byte("ok"), viaUpstream, 0)
	_, r = open()
	wantReplayIR(t, immediateOf(r), 200, []byte("ok"))
}

// Methods outside the route's idempotency methods pass untouched.
func TestExtProcAloneIgnoresOtherMethods(t *testing.T) {
	e := startIdem(t, idemPolicy)
	s := e.open(t)
	if r := s.send(reqHeaders(buffered, true, nil, ":method", "GET", ":path", "/orders/1")); r.GetRequestHeaders() == nil {
		t.Fatalf("GET answered %v", r)
	}
	s.upstream(200, []byte("list"), viaUpstream, 0)
	if got := e.event(apiExtProc, idempotency.EventAcquired); got != 0 {
		t.Fatalf("acquired = %v for a GET", got)
	}
}
