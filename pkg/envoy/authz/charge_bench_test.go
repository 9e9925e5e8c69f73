package authz

import (
	"context"
	"strconv"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
	"github.com/extauthz/extauthz/pkg/idempotency/memstore"
	"github.com/extauthz/extauthz/pkg/policy"
	lockoutmem "github.com/extauthz/extauthz/pkg/ratelimit/lockout/memstore"
)

// BenchmarkChargeResponse is the response side of one charged request in
// ext_proc, in process over the memory stores: the plan handed over by
// ext_authz taken up, then the response's headers (and body) read and the
// charge written. outcome: a 401 counted by on_status; cost_header: the
// cost in a header; cost_json: the cost in a small JSON body.
//
//	go test -run '^$' -bench '^BenchmarkChargeResponse$' -benchmem ./pkg/envoy/authz/
func BenchmarkChargeResponse(b *testing.B) {
	p := envoytest.WritePolicy(b, chargePolicy)
	h := p.HTTP
	ep := benchExtProc(b, p)
	route := func(name string) *policy.Route {
		for _, r := range h.Routes {
			if r.Name == name {
				return r
			}
		}
		b.Fatalf("no route %s", name)
		return nil
	}
	cases := []struct {
		name   string
		route  string
		status string
		kv     []string
		body   []byte
	}{
		{"outcome", "login", "401", nil, nil},
		{"cost_header", "header-cost", "200", []string{"x-usage-tokens", "1"}, nil},
		{"cost_json", "chat", "200", []string{"content-type", "application/json"}, []byte(`{"id":"c1","usage":{"prompt_tokens":1,"completion_tokens":0,"total_tokens":1}}`)},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			r := route(c.route)
			plans := make([]chargePlan, 1024)
			for i := range plans {
				in := callerInput{headers: headerList{{Name: "x-tenant-id", Value: "t" + strconv.Itoa(i)}}, address: "10.0.0." + strconv.Itoa(i%250) + ":1"}
				plans[i], _ = ep.charges.plan(limitScope(callerScope(h.Identity, in), in), r, in, keyBody{data: []byte(`{"username":"u` + strconv.Itoa(i) + `"}`)})
			}
			headers := respHeaders(respAttrs(viaUpstream, 0), c.body == nil, append([]string{":status", c.status}, c.kv...)...)
			var body *extprocv3.ProcessingRequest
			if c.body != nil {
				body = respBody(c.body)
			}
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				st := newProcStream(ctx, ep)
				st.startCharges(plans[i%len(plans)])
				if _, err := st.handle(headers); err != nil {
					b.Fatal(err)
				}
				if body != nil {
					if _, err := st.handle(body); err != nil {
						b.Fatal(err)
					}
				}
				st.finish()
				i++
			}
		})
	}
}

func benchExtProc(b *testing.B, p *policy.Policy) *ExtProc {
	b.Helper()
	m, err := envoy.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	ev, err := NewIdempotencyMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	cm, err := NewChargeMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	limits := envoytest.NewTestStore(b, time.Now)
	ep, err := NewExtProc(memstore.New(memstore.Config{}), envoy.PolicyFunc(func() *policy.Policy { return p }), m, ev,
		WithCharges(limits, lockoutmem.New(lockoutmem.Config{}), cm))
	if err != nil {
		b.Fatal(err)
	}
	return ep
}
