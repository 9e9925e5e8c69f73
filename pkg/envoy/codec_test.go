package envoy

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
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

// hostileValues are byte strings that must each get their own counter.
// Pairs that a careless encoding would merge sit next to each other.
var hostileValues = []string{
	"plain", "\xff", "\uFDD0FF", "%FF", "\uFDD0\uFDD0FF", "\uFDD0", "\uFDD0\uFDD0",
	"\xff\xfe", "\ufffd", "\xef\xbf", "a\x80b", "a\uFDD080b",
	"\x00", "a\x00b", "a%00b", "{", "}", "{x}", "|", "a|b=c", "a|b%3Dc", ":", "a:b",
	"%", "%25", "#", "#abc", "=", "\r\n", " ", "é", "e\u0301", "\xed\xa0\x80", // a UTF-16 surrogate
	"\xc0\xaf", // overlong '/'
}

func TestCodecRewriteIsInjectiveAndValid(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	for _, v := range hostileValues {
		got := &commonrlv3.RateLimitDescriptor_Entry{}
		if err := UnmarshalLenient(rawDescriptorEntry(v), got); err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		out := got.GetValue()
		if !utf8.ValidString(out) {
			t.Errorf("%q decoded to invalid UTF-8 %q", v, out)
		}
		if utf8.ValidString(v) && !bytes.Contains([]byte(v), escapeBytes) && out != v {
			t.Errorf("valid %q was rewritten to %q", v, out)
		}
		if prev, dup := seen[out]; dup {
			t.Errorf("%q and %q both decode to %q", prev, v, out)
		}
		seen[out] = v
	}
}

// rawDescriptorEntry encodes one Entry{key: "k", value: v}.
func rawDescriptorEntry(v string) []byte {
	var e []byte
	e = protowire.AppendTag(e, 1, protowire.BytesType)
	e = protowire.AppendString(e, "k")
	e = protowire.AppendTag(e, 2, protowire.BytesType)
	return protowire.AppendString(e, v)
}

func TestCodecRewritesNestedMapsAndStructs(t *testing.T) {
	t.Parallel()
	// A CheckRequest with a valid placeholder in every string position,
	// then the placeholder's bytes replaced on the wire by invalid ones of
	// the same length.
	const mark = "\x01MARK\x01"
	st, err := structpb.NewStruct(map[string]any{"sub": mark, "nested": map[string]any{"k": mark}})
	if err != nil {
		t.Fatal(err)
	}
	req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Path: mark, Headers: map[string]string{"x-tenant": mark, mark: "v"},
		}},
		Source:            &authv3.AttributeContext_Peer{Principal: mark},
		ContextExtensions: map[string]string{"k": mark},
	}}
	req.Attributes.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"envoy.filters.http.jwt_authn": st}}
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.ReplaceAll(b, []byte(mark), []byte("\xffMARK\xfe"))
	got := &authv3.CheckRequest{}
	if err := UnmarshalLenient(bad, got); err != nil {
		t.Fatalf("UnmarshalLenient: %v", err)
	}
	want := "\uFDD0FFMARK\uFDD0FE"
	h := got.GetAttributes().GetRequest().GetHttp()
	jwt := got.GetAttributes().GetMetadataContext().GetFilterMetadata()["envoy.filters.http.jwt_authn"]
	for name, v := range map[string]string{
		"path": h.GetPath(), "header value": h.GetHeaders()["x-tenant"], "principal": got.GetAttributes().GetSource().GetPrincipal(),
		"context extension": got.GetAttributes().GetContextExtensions()["k"],
		"struct string":     jwt.GetFields()["sub"].GetStringValue(),
		"nested struct":     jwt.GetFields()["nested"].GetStructValue().GetFields()["k"].GetStringValue(),
	} {
		if v != want {
			t.Errorf("%s = %q, want %q", name, v, want)
		}
	}
	if _, ok := h.GetHeaders()[want]; !ok {
		t.Errorf("header name not rewritten: %v", h.GetHeaders())
	}
	// The answer built from these strings marshals.
	if _, err := NewCodec().Marshal(got); err != nil {
		t.Errorf("Marshal after rewrite: %v", err)
	}
	// Malformed wire data is still an error, proto's own.
	if err := UnmarshalLenient(bad[:len(bad)-1], &authv3.CheckRequest{}); err == nil {
		t.Error("truncated message decoded")
	}
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
			conn := serveLoopback(t, e.rls)
			reqFor := func(v string) rawMsg {
				if pos == "tenant" {
					return rawRLS("api", rawDescriptor("tenant", v, "client", "c"))
				}
				return rawRLS("api", rawDescriptor("client", v))
			}
			for round, want := range []rlsv3.RateLimitResponse_Code{codeOK, codeOK, codeOver} {
				for _, v := range hostileValues {
					if got := callRaw(t, conn, reqFor(v)).GetOverallCode(); got != want {
						t.Errorf("round %d, %q: %v, want %v", round+1, v, got, want)
					}
				}
			}
			n := float64(len(hostileValues))
			for outcome, want := range map[string]float64{OutcomeOK: 2 * n, OutcomeOverLimit: n} {
				got := counterValue(t, e.reg, "extauthz_decisions_total", map[string]string{"api": APIRateLimit, "domain": "api", "outcome": outcome})
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

func ExampleCodec() {
	// "\xff" is not UTF-8; grpc-go's default codec would fail the call.
	var b []byte
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendString(b, "tenant-\xff")
	e := &commonrlv3.RateLimitDescriptor_Entry{}
	fmt.Println(UnmarshalLenient(b, e), e.GetValue() == "tenant-\uFDD0FF")
	// Output: <nil> true
}

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
		for _, k := range []string{secretKey, secretKey + "2"} {
			if got := e.call(t, request("api", desc("api_key", k))).GetOverallCode(); got != want {
				t.Errorf("call %d, key %q: %v, want %v", i+1, k, got, want)
			}
		}
	}
	for _, call := range e.store.Calls() {
		for _, r := range call {
			if strings.Contains(r.Key, secretKey) || !strings.Contains(r.Key, "sha256") {
				t.Errorf("counter key %q: want the API key hashed", r.Key)
			}
		}
	}
}
