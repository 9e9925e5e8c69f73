package authz

import (
	"context"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
	"github.com/extauthz/extauthz/pkg/idempotency/memstore"
	"github.com/extauthz/extauthz/pkg/policy"
)

// The wire fuzzers feed raw bytes through the servers' codec (as a gRPC
// message body arrives) to the handler. Seeds live in testdata/fuzz/<name>.

// FuzzCheckWire: every CheckRequest the codec decodes (invalid UTF-8
// included) gets a decision; the only error Check may return is the
// rate-limit store's, which this store never fails.
func FuzzCheckWire(f *testing.F) {
	for _, r := range []*authv3.CheckRequest{
		checkReq("POST", "/orders/1", []byte("{}"), "x-tenant-id", "acme", "idempotency-key", `"k"`),
		checkReq("GET", "/limited/x", nil, "x-tenant-id", "a|b"),
		withAddress(checkReq("GET", "/limited", nil), "10.0.0.1"),
		{},
	} {
		b, _ := proto.Marshal(r)
		f.Add(b)
	}
	p := envoytest.WritePolicy(f, idemPolicy)
	reg := prometheus.NewRegistry()
	m, _ := envoy.NewMetrics(reg)
	ev, _ := NewIdempotencyMetrics(reg)
	src := envoy.PolicyFunc(func() *policy.Policy { return p })
	az, err := NewAuthz(envoytest.NewTestStore(f, t0Func), memstore.New(memstore.Config{}), src, m, ev)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req := &authv3.CheckRequest{}
		if envoy.UnmarshalLenient(b, req) != nil {
			return
		}
		resp, err := az.Check(context.Background(), req)
		if err != nil {
			t.Fatalf("Check(%v): %v", req, err)
		}
		if d := resp.GetDeniedResponse(); d != nil {
			checkStatus(t, int(d.GetStatus().GetCode()))
		} else if resp.GetOkResponse() == nil {
			t.Fatalf("neither admitted nor denied: %v", resp)
		}
		if _, err := envoy.NewCodec().Marshal(resp); err != nil {
			t.Fatalf("response does not marshal: %v", err)
		}
	})
}

// FuzzProcessWire: a stream of up to three ProcessingRequests decoded by
// the codec is answered message by message; the only error is a message
// without a known phase, and every answer marshals.
func FuzzProcessWire(f *testing.F) {
	first, _ := proto.Marshal(reqHeaders(buffered, false, nil, ":method", "POST", ":path", "/orders/1",
		"x-tenant-id", "acme", "idempotency-key", `"k"`))
	body, _ := proto.Marshal(reqBody([]byte("{}")))
	resp, _ := proto.Marshal(respHeaders(respAttrs(viaUpstream, 0), false, ":status", "201"))
	f.Add(first, body, resp)
	f.Add([]byte{}, []byte{}, []byte{})
	p := envoytest.WritePolicy(f, idemPolicy)
	reg := prometheus.NewRegistry()
	m, _ := envoy.NewMetrics(reg)
	ev, _ := NewIdempotencyMetrics(reg)
	proc, err := NewExtProc(memstore.New(memstore.Config{}), envoy.PolicyFunc(func() *policy.Policy { return p }), m, ev)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, m1, m2, m3 []byte) {
		st := newProcStream(context.Background(), proc)
		defer st.finish()
		for _, b := range [][]byte{m1, m2, m3} {
			req := &extprocv3.ProcessingRequest{}
			if envoy.UnmarshalLenient(b, req) != nil {
				return
			}
			resp, err := st.handle(req)
			if err != nil {
				if req.GetRequest() != nil {
					t.Fatalf("handle(%v): %v", req, err)
				}
				return
			}
			if _, err := envoy.NewCodec().Marshal(resp); err != nil {
				t.Fatalf("response %v does not marshal: %v", resp, err)
			}
			if ir := resp.GetImmediateResponse(); ir != nil {
				checkStatus(t, int(ir.GetStatus().GetCode()))
				return
			}
		}
	})
}
