package authz

import (
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// When request trailers follow the body (HTTP/2, gRPC, chunked trailers),
// Envoy's BUFFERED mode sends the whole body with end_of_stream false and,
// with request_trailer_mode SKIP (the documented wiring a), no trailers
// message: the decision must still be taken on that body, not skipped.
func TestExtProcAloneBodyBeforeSkippedTrailers(t *testing.T) {
	e := startIdem(t, idemPolicy)
	post := func() (*stream, *extprocv3.ProcessingResponse) {
		s := e.open(t)
		r := s.send(reqHeaders(buffered, false, nil, ":method", "POST", ":path", "/orders/1", "x-tenant-id", "acme", "idempotency-key", "tr"))
		if r.GetRequestHeaders() == nil {
			t.Fatalf("request headers answered %v", r)
		}
		return s, s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: []byte("{}"), EndOfStream: false}}})
	}
	first, r := post()
	if r.GetRequestBody() == nil {
		t.Fatalf("first request body answered %v, want it to go upstream", r)
	}
	_, r = post()
	wantProblemIR(t, immediateOf(r), 409, ProblemInProgress)
	first.upstream(200, []byte("done"), viaUpstream, 0)
	_, r = post()
	wantReplayIR(t, immediateOf(r), 200, []byte("done"))
}

// The same on the response side: a BUFFERED response body followed by
// skipped trailers is the whole reply, and is stored (keeping the lease
// instead would answer 409 until its TTL and then run the request again).
func TestExtProcAloneResponseBodyBeforeSkippedTrailers(t *testing.T) {
	e := startIdem(t, idemPolicy)
	s, ir := e.postA(t, "/orders/1", "acme", "rt", []byte("{}"))
	if ir != nil {
		t.Fatal("did not go upstream")
	}
	if r := s.send(respHeaders(respAttrs(viaUpstream, 0), false, ":status", "201")); r.GetResponseHeaders() == nil {
		t.Fatalf("response headers answered %v", r)
	}
	if r := s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: []byte("made"), EndOfStream: false}}}); r.GetResponseBody() == nil {
		t.Fatalf("response body answered %v", r)
	}
	s.close()
	_, ir = e.postA(t, "/orders/1", "acme", "rt", []byte("{}"))
	wantReplayIR(t, ir, 201, []byte("made"))
}
