package authz

import (
	"context"
	"testing"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
	"github.com/extauthz/extauthz/pkg/idempotency/memstore"
	"github.com/extauthz/extauthz/pkg/policy"
	lockoutmem "github.com/extauthz/extauthz/pkg/ratelimit/lockout/memstore"
)

// FuzzChargeServers: whatever a request and its response carry (path,
// body, status, cost header, content type, reply body in chunks), neither
// server panics nor fails the call, and every answer is a continue or a
// well-formed reply.
func FuzzChargeServers(f *testing.F) {
	f.Add("/login", []byte(`{"username":"a"}`), "401", "1", "application/json", []byte(`{"usage":{"total_tokens":3}}`), 3)
	f.Add("/v1/chat", []byte("username=a"), "200", "-5", "text/event-stream", []byte("data: {\"usage\":{\"total_tokens\":1e30}}\n\n"), 1)
	f.Add("/h", []byte{0xff}, "abc", "9999999999999999999", "text/event-stream;x", []byte("\r\n\r\ndata:\n\n"), 0)
	p := envoytest.WritePolicy(f, chargePolicy)
	reg := prometheus.NewRegistry()
	m, _ := envoy.NewMetrics(reg)
	ev, _ := NewIdempotencyMetrics(reg)
	cm, _ := NewChargeMetrics(reg)
	store := memstore.New(memstore.Config{})
	limits := envoytest.NewTestStore(f, t0Func)
	opts := WithCharges(limits, lockoutmem.New(lockoutmem.Config{Now: t0Func}), cm)
	src := envoy.PolicyFunc(func() *policy.Policy { return p })
	proc, _ := NewExtProc(store, src, m, ev, opts)
	az, _ := NewAuthz(limits, store, src, m, ev, opts)
	f.Fuzz(func(t *testing.T, path string, body []byte, status, cost, ctype string, reply []byte, chunk int) {
		req := checkFrom("192.0.2.1", "POST", path, body, "x-tenant-id", "acme", "x-max-tokens", cost, "content-type", ctype)
		r, err := az.Check(context.Background(), req)
		if err != nil {
			t.Fatalf("Check failed on request input: %v", err)
		}
		if d := r.GetDeniedResponse(); d != nil {
			checkStatus(t, int(d.GetStatus().GetCode()))
		}
		st := newProcStream(context.Background(), proc)
		first := reqHeaders(filterv3.ProcessingMode_BUFFERED, false, nil, ":method", "POST", ":path", path, "x-tenant-id", "acme", "content-type", ctype)
		first.ProtocolConfig.ResponseBodyMode = filterv3.ProcessingMode_STREAMED
		for _, msg := range []*extprocv3.ProcessingRequest{first, reqBody(body),
			respHeaders(respAttrs(viaUpstream, 0), false, ":status", status, "x-usage-tokens", cost, "content-type", ctype)} {
			st.observe(msg)
			resp, err := st.handle(msg)
			if err != nil {
				t.Fatalf("ext_proc failed on request input: %v", err)
			}
			if ir := resp.GetImmediateResponse(); ir != nil {
				checkStatus(t, int(ir.GetStatus().GetCode()))
				st.finish()
				return
			}
		}
		for n := max(chunk, 1); len(reply) > 0; reply = reply[min(n, len(reply)):] {
			msg := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: reply[:min(n, len(reply))]}}}
			if _, err := st.handle(msg); err != nil {
				t.Fatal(err)
			}
		}
		st.finish()
	})
}
