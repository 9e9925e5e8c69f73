package authz

import (
	"bytes"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/idempotency/redisstore"
)

// Both wirings over a real Redis: a large compressible body and a binary
// one are stored (gzip in Redis) and replayed byte for byte; the 409 while
// in flight comes from Redis's own lease TTL.
func TestIdempotencyOverRedis(t *testing.T) {
	c := redistest.Standalone(t).Client()
	rs, err := redisstore.New(c, redisstore.Options{Prefix: "grpc"})
	if err != nil {
		t.Fatal(err)
	}
	// The production bound (100 ms) is for a quiet Redis next door; this
	// test shares a 2-core machine with every other package's tests, and a
	// store call past its bound would answer the failure mode, not replay.
	e := startIdemStore(t, idemPolicy, rs, WithStoreTimeout(5*time.Second))

	text := bytes.Repeat([]byte(`{"line":"compressible"}`), 150) // 3450 bytes
	s, ir := e.postA(t, "/orders/1", "acme", "text", []byte("{}"))
	if ir != nil {
		t.Fatal("did not go upstream")
	}
	_, ir = e.postA(t, "/orders/1", "acme", "text", []byte("{}"))
	wantProblemIR(t, ir, 409, ProblemInProgress)
	s.upstream(201, text, viaUpstream, 0, "content-type", "application/json")
	if enc := c.HGet(t.Context(), rs.Key("acme", "text"), "enc").Val(); enc != "gzip" {
		t.Errorf("stored encoding %q, want gzip", enc)
	}
	_, ir = e.postA(t, "/orders/1", "acme", "text", []byte("{}"))
	wantReplayIR(t, ir, 201, text)

	bin := make([]byte, 256)
	for i := range bin {
		bin[i] = byte(i)
	}
	md := wantLease(t, e.post(t, "/orders/2", "acme", "bin", []byte("{}")), envoy.ActionLease)
	s = e.open(t)
	s.send(reqHeaders(0, false, md, ":method", "POST", ":path", "/orders/2"))
	s.upstream(200, bin, viaUpstream, 0)
	md = wantLease(t, e.post(t, "/orders/2", "acme", "bin", []byte("{}")), envoy.ActionReplay)
	s = e.open(t)
	wantReplayIR(t, immediateOf(s.send(reqHeaders(0, false, md, ":method", "POST", ":path", "/orders/2"))), 200, bin)
}
