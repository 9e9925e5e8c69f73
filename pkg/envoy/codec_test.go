package envoy

import (
	"bytes"
	"fmt"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

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

func ExampleCodec() {
	// "\xff" is not UTF-8; grpc-go's default codec would fail the call.
	var b []byte
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendString(b, "tenant-\xff")
	e := &commonrlv3.RateLimitDescriptor_Entry{}
	fmt.Println(UnmarshalLenient(b, e), e.GetValue() == "tenant-\uFDD0FF")
	// Output: <nil> true
}
