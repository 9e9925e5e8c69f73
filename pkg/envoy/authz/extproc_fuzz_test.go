package authz

import (
	"context"
	"testing"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
	"github.com/extauthz/extauthz/pkg/idempotency/memstore"
	"github.com/extauthz/extauthz/pkg/policy"
)

// FuzzIdempotencyServers: whatever a request carries (method, path, key,
// tenant, body, response status and headers), neither server panics, and
// every answer is a continue or a well-formed reply.
func FuzzIdempotencyServers(f *testing.F) {
	f.Add("POST", "/orders/1", "k", "acme", []byte("{}"), "201", "x-custom", "v")
	f.Add("POST", "/orders", `"a\"b"`, "", []byte{0xff}, "500", "set-cookie", "a=b")
	f.Add("PATCH", "/strict?x", "", "a|b", []byte(nil), "abc", ":status", "")
	p := envoytest.WritePolicy(f, idemPolicy)
	reg := prometheus.NewRegistry()
	m, _ := envoy.NewMetrics(reg)
	ev, _ := NewIdempotencyMetrics(reg)
	store := memstore.New(memstore.Config{})
	src := envoy.PolicyFunc(func() *policy.Policy { return p })
	proc, _ := NewExtProc(store, src, m, ev)
	az, _ := NewAuthz(envoytest.NewTestStore(f, t0Func), store, src, m, ev)
	f.Fuzz(func(t *testing.T, method, path, key, tenant string, body []byte, status, hname, hvalue string) {
		st := newProcStream(context.Background(), proc)
		first := reqHeaders(filterv3.ProcessingMode_BUFFERED, false, nil,
			":method", method, ":path", path, "idempotency-key", key, "x-tenant-id", tenant)
		st.observe(first)
		resp := st.requestHeaders(first, first.GetRequestHeaders())
		if ir := resp.GetImmediateResponse(); ir != nil {
			checkStatus(t, int(ir.GetStatus().GetCode()))
			return
		}
		if ir := st.requestBody(reqBody(body).GetRequestBody()).GetImmediateResponse(); ir != nil {
			checkStatus(t, int(ir.GetStatus().GetCode()))
			return
		}
		st.responseHeaders(respHeaders(respAttrs(viaUpstream, 0), false, ":status", status, hname, hvalue).GetResponseHeaders())
		st.responseBody(respBody(body).GetResponseBody())
		st.finish()

		req := checkReq(method, path, body, "idempotency-key", key, "x-tenant-id", tenant, hname, hvalue)
		if r, err := az.Check(context.Background(), req); err == nil && r.GetDeniedResponse() != nil {
			checkStatus(t, int(r.GetDeniedResponse().GetStatus().GetCode()))
		}
	})
}

func t0Func() time.Time { return envoytest.T0 }

func checkStatus(t *testing.T, code int) {
	t.Helper()
	if code < 100 || code > 599 {
		t.Fatalf("answered status %d", code)
	}
}
