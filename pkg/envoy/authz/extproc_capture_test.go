package authz

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"sync"
	"testing"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/idempotency/blob/blobtest"
	"github.com/extauthz/extauthz/pkg/idempotency/memstore"
)

// capturePolicy: /orders keeps 4 KiB inline and up to 16 KiB in the blob
// store; /a and /b share keys per route (key_scope route).
const capturePolicy = `
http:
  tenant: {header: x-tenant-id, default: public}
  routes:
    - name: orders
      path_prefix: /orders
      idempotency: {key_required: true, max_body_bytes: 4096, max_stored_body_bytes: 16384}
    - name: a
      path_prefix: /a
      idempotency: {key_scope: route}
    - name: b
      path_prefix: /b
      idempotency: {key_scope: route}
    - name: c
      path_prefix: /c
      idempotency: {}
    - name: d
      path_prefix: /d
      idempotency: {}
`

// completions records what the ext_proc completes.
type completions struct {
	idempotency.Store
	mu   sync.Mutex
	last idempotency.Response
}

func (c *completions) Complete(ctx context.Context, l idempotency.Lease, r idempotency.Response) error {
	c.mu.Lock()
	c.last = r.Clone()
	c.mu.Unlock()
	return c.Store.Complete(ctx, l, r)
}

func (c *completions) lastResponse() idempotency.Response {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// streamedUpstream sends the response as Envoy's STREAMED mode does: the
// headers, then each chunk, the last with end_of_stream.
func (s *stream) streamedUpstream(status int, chunks ...[]byte) {
	s.t.Helper()
	r := s.send(respHeaders(respAttrs(viaUpstream, 0), len(chunks) == 0, ":status", strconv.Itoa(status)))
	if r.GetResponseHeaders() == nil {
		s.t.Fatalf("response headers answered %v", r)
	}
	for i, c := range chunks {
		msg := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
			ResponseBody: &extprocv3.HttpBody{Body: c, EndOfStream: i == len(chunks)-1}}}
		if r := s.send(msg); r.GetResponseBody() == nil {
			s.t.Fatalf("chunk %d answered %v", i, r)
		}
	}
	s.close()
}

// postStreamed is postA with the STREAMED response mode announced.
func (e *idemEnv) postStreamed(t *testing.T, path, key string) *stream {
	t.Helper()
	s := e.open(t)
	req := reqHeaders(buffered, false, nil, ":method", "POST", ":path", path, "x-tenant-id", "acme", "idempotency-key", key)
	req.ProtocolConfig.ResponseBodyMode = filterv3.ProcessingMode_STREAMED
	if r := s.send(req); r.GetRequestHeaders() == nil {
		t.Fatalf("request headers answered %v", r)
	}
	if r := s.send(reqBody([]byte("{}"))); r.GetRequestBody() == nil {
		t.Fatalf("request body answered %v", r)
	}
	return s
}

func chunksOf(b []byte, n int) [][]byte {
	var out [][]byte
	for len(b) > n {
		out = append(out, b[:n])
		b = b[n:]
	}
	return append(out, b)
}

// A streamed reply within max_body_bytes is kept inline; one above it, up
// to max_stored_body_bytes, is written to the blob store and the record
// holds its reference (name from the key hash, size, SHA-256).
func TestExtProcStreamedCapture(t *testing.T) {
	rec := &completions{Store: memstore.New(memstore.Config{})}
	blobs := blobtest.New()
	e := startIdemStore(t, capturePolicy, rec, WithBlobStore(blobs))

	small := bytes.Repeat([]byte("s"), 4000)
	e.postStreamed(t, "/orders/1", "small").streamedUpstream(201, chunksOf(small, 1000)...)
	if got := rec.lastResponse(); !bytes.Equal(got.Body, small) || got.BodyRef != nil || blobs.Len() != 0 {
		t.Fatalf("small reply: inline %d bytes, ref %v, %d objects; want 4000 inline bytes", len(got.Body), got.BodyRef, blobs.Len())
	}

	big := make([]byte, 15000)
	for i := range big {
		big[i] = byte(i * 31)
	}
	e.postStreamed(t, "/orders/1", "big").streamedUpstream(201, chunksOf(big, 1024)...)
	got := rec.lastResponse()
	sum := sha256.Sum256(big)
	if got.BodyRef == nil || len(got.Body) != 0 || got.BodyRef.Size != int64(len(big)) || got.BodyRef.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("big reply completed as %+v (ref %+v), want a reference to 15000 bytes", got, got.BodyRef)
	}
	if obj, ok := blobs.Object(got.BodyRef.Name); !ok || !bytes.Equal(obj, big) {
		t.Fatalf("object %q holds %d bytes, want the reply's 15000", got.BodyRef.Name, len(obj))
	}
	if e.event(apiExtProc, idempotency.EventStored) != 2 {
		t.Errorf("stored = %v, want 2", e.event(apiExtProc, idempotency.EventStored))
	}
}

// Above max_stored_body_bytes, or with the blob store failing, the reply
// passes through, the spilled object is aborted and the key is completed
// as not replayable: the retry gets the problem, never a second run.
func TestExtProcStreamedCaptureNotKept(t *testing.T) {
	blobs := blobtest.New()
	e := startIdemStore(t, capturePolicy, nil, WithBlobStore(blobs))
	huge := bytes.Repeat([]byte("h"), 16385)
	e.postStreamed(t, "/orders/1", "huge").streamedUpstream(201, chunksOf(huge, 4096)...)
	_, ir := e.postA(t, "/orders/1", "acme", "huge", []byte("{}"))
	wantNotReplayable(t, ir, 201)
	if blobs.Len() != 0 || blobs.Aborted() != 1 {
		t.Errorf("%d objects, %d aborted; want the spilled object aborted", blobs.Len(), blobs.Aborted())
	}

	blobs.Fail.Store(true)
	e.postStreamed(t, "/orders/1", "down").streamedUpstream(200, chunksOf(huge[:8000], 4096)...)
	_, ir = e.postA(t, "/orders/1", "acme", "down", []byte("{}"))
	wantNotReplayable(t, ir, 200)

	s := e.postStreamed(t, "/orders/1", "declared")
	s.send(respHeaders(respAttrs(viaUpstream, 0), false, ":status", "202", "content-length", "16385"))
	s.close()
	_, ir = e.postA(t, "/orders/1", "acme", "declared", []byte("{}"))
	wantNotReplayable(t, ir, 202)
}

// key_scope route: one key on two routes is two operations; on tenant-
// scoped routes (the default) it is one, the second a key reuse.
func TestKeyScope(t *testing.T) {
	e := startIdem(t, capturePolicy)
	for _, path := range []string{"/a/1", "/b/1"} {
		s, ir := e.postA(t, path, "acme", "k", []byte("{}"))
		if ir != nil {
			t.Fatalf("%s answered %d, want it to run (route scope)", path, ir.GetStatus().GetCode())
		}
		s.upstream(201, []byte(path), viaUpstream, 0)
	}
	for _, path := range []string{"/a/1", "/b/1"} {
		_, ir := e.postA(t, path, "acme", "k", []byte("{}"))
		wantReplayIR(t, ir, 201, []byte(path))
	}
	s, _ := e.postA(t, "/c/1", "acme", "k", []byte("{}"))
	s.upstream(201, []byte("c"), viaUpstream, 0)
	_, ir := e.postA(t, "/d/1", "acme", "k", []byte("{}"))
	wantProblemIR(t, ir, 422, ProblemKeyReused)
	// Through ext_authz too.
	wantLease(t, e.post(t, "/a/2", "acme", "k2", []byte("{}")), envoy.ActionLease)
	wantLease(t, e.post(t, "/b/2", "acme", "k2", []byte("{}")), envoy.ActionLease)
}

// Wiring (b): a reply over max_body_bytes (no blob store) completes the
// key as not replayable; ext_authz answers the retry with the problem.
func TestWiringBTooLargeIsNotReplayable(t *testing.T) {
	e := startIdem(t, idemPolicy)
	md := wantLease(t, e.post(t, "/orders/1", "acme", "k", []byte("{}")), envoy.ActionLease)
	s := e.open(t)
	s.send(reqHeaders(filterv3.ProcessingMode_NONE, false, md, ":method", "POST", ":path", "/orders/1"))
	s.upstream(201, bytes.Repeat([]byte("x"), 5000), viaUpstream, 0)
	wantDenied(t, e.post(t, "/orders/1", "acme", "k", []byte("{}")), 409, ProblemNotReplayable)
	if got := e.event(envoy.APIExtAuthz, idempotency.EventUnreplayable); got != 1 {
		t.Errorf("unreplayable = %v, want 1", got)
	}
}

// A stream that ends in the middle of a spilled body (client reset,
// ext_proc timeout) aborts the object and completes the key as not
// replayable with the status seen.
func TestExtProcStreamEndsMidSpill(t *testing.T) {
	blobs := blobtest.New()
	e := startIdemStore(t, capturePolicy, nil, WithBlobStore(blobs))
	s := e.postStreamed(t, "/orders/1", "cut")
	s.send(respHeaders(respAttrs(viaUpstream, 0), false, ":status", "201"))
	for range 2 {
		msg := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
			ResponseBody: &extprocv3.HttpBody{Body: make([]byte, 3000)}}}
		if r := s.send(msg); r.GetResponseBody() == nil {
			t.Fatalf("chunk answered %v", r)
		}
	}
	s.close()
	_, ir := e.postA(t, "/orders/1", "acme", "cut", []byte("{}"))
	wantNotReplayable(t, ir, 201)
	if blobs.Len() != 0 || blobs.Aborted() != 1 {
		t.Errorf("%d objects, %d aborted; want the partial object aborted", blobs.Len(), blobs.Aborted())
	}
}
