package rls

import (
	"context"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
)

// rawMsg is a request already encoded on the wire, bytes as they are.
type rawMsg []byte

// rawCodec is the client side of the hostile tests: it sends rawMsg
// unchanged (so invalid UTF-8 reaches the server, as Envoy sends it) and
// decodes replies with proto.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.(rawMsg))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return proto.Unmarshal(data.Materialize(), v.(proto.Message))
}

// rawDescriptor encodes a RateLimitDescriptor whose entries are kv pairs of
// arbitrary bytes.
func rawDescriptor(kv ...string) []byte {
	var d []byte
	for i := 0; i+1 < len(kv); i += 2 {
		var e []byte
		e = protowire.AppendTag(e, 1, protowire.BytesType)
		e = protowire.AppendString(e, kv[i])
		e = protowire.AppendTag(e, 2, protowire.BytesType)
		e = protowire.AppendString(e, kv[i+1])
		d = protowire.AppendTag(d, 1, protowire.BytesType)
		d = protowire.AppendBytes(d, e)
	}
	return d
}

// rawRLS encodes a RateLimitRequest of domain and raw descriptors.
func rawRLS(domain string, descs ...[]byte) rawMsg {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, domain)
	for _, d := range descs {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, d)
	}
	return b
}

// callRaw sends raw bytes as a ShouldRateLimit request over the wire.
func callRaw(t *testing.T, conn grpc.ClientConnInterface, req rawMsg) *rlsv3.RateLimitResponse {
	t.Helper()
	resp := &rlsv3.RateLimitResponse{}
	err := conn.Invoke(context.Background(), "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
		req, resp, grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

// TestRLSRawBytesOverTheWireAreLimitedLikeAnyOther sends every hostile value
// as a raw descriptor value and as the tenant through a real gRPC client:
// each is decided (no error), has its own budget of 2, and the third call is
// denied; none shares another's counter.
func TestRLSRawBytesOverTheWireAreLimitedLikeAnyOther(t *testing.T) {
	t.Parallel()
	for _, pos := range []string{"value", "tenant"} {
		t.Run(pos, func(t *testing.T) {
			t.Parallel()
			e := startRLS(t, perClientPolicy)
			conn := envoytest.ServeLoopback(t, e.rls)
			reqFor := func(v string) rawMsg {
				if pos == "tenant" {
					return rawRLS("api", rawDescriptor("tenant", v, "client", "c"))
				}
				return rawRLS("api", rawDescriptor("client", v))
			}
			for round, want := range []rlsv3.RateLimitResponse_Code{codeOK, codeOK, codeOver} {
				for _, v := range envoytest.HostileValues {
					if got := callRaw(t, conn, reqFor(v)).GetOverallCode(); got != want {
						t.Errorf("round %d, %q: %v, want %v", round+1, v, got, want)
					}
				}
			}
			n := float64(len(envoytest.HostileValues))
			for outcome, want := range map[string]float64{envoy.OutcomeOK: 2 * n, envoy.OutcomeOverLimit: n} {
				got := envoytest.CounterValue(t, e.reg, "extauthz_decisions_total", map[string]string{"api": envoy.APIRateLimit, "domain": "api", "outcome": outcome})
				if got != want {
					t.Errorf("decisions_total{outcome=%s} = %v, want %v", outcome, got, want)
				}
			}
		})
	}
}

// perClientPolicy gives every client value (per tenant) 2 requests a minute.
const perClientPolicy = `
domain: api
descriptors:
  - key: client
    rate_limit:
      name: per_client
      unit: minute
      requests_per_unit: 2
      algorithm: fixed_window
`

// apiKey is a credential sent as a descriptor value.
const apiKey = "sk_live_SECRET"

// An api_key descriptor value is limited per key but never reaches a
// counter key in clear.
func TestRLSHashesSecretValues(t *testing.T) {
	t.Parallel()
	e := startRLS(t, `
domain: api
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window}
`)
	for i, want := range []rlsv3.RateLimitResponse_Code{codeOK, codeOver} {
		for _, k := range []string{apiKey, apiKey + "2"} {
			if got := e.call(t, envoytest.Request("api", envoytest.Desc("api_key", k))).GetOverallCode(); got != want {
				t.Errorf("call %d, key %q: %v, want %v", i+1, k, got, want)
			}
		}
	}
	for _, call := range e.store.Calls() {
		for _, r := range call {
			if strings.Contains(r.Key, apiKey) || !strings.Contains(r.Key, "sha256") {
				t.Errorf("counter key %q: want the API key hashed", r.Key)
			}
		}
	}
}
