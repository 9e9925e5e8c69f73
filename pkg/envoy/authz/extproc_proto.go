package authz

import (
	"math"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/extauthz/extauthz/pkg/idempotency"
)

// protoHeaders reads an ext_proc header map (values in raw_value).
func protoHeaders(hm *corev3.HeaderMap) headerList {
	out := make(headerList, 0, len(hm.GetHeaders()))
	for _, h := range hm.GetHeaders() {
		v := h.GetValue()
		if len(h.GetRawValue()) > 0 {
			v = string(h.GetRawValue())
		}
		out = append(out, idempotency.Header{Name: strings.ToLower(h.GetKey()), Value: v})
	}
	return out
}

func continueRequestHeaders() *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
		RequestHeaders: &extprocv3.HeadersResponse{}}}
}

func continueRequestBody() *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
		RequestBody: &extprocv3.BodyResponse{}}}
}

func continueResponseHeaders() *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{}}}
}

func continueResponseBody() *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
		ResponseBody: &extprocv3.BodyResponse{}}}
}

func requestHeadersReply(r *reply) *extprocv3.ProcessingResponse {
	if r == nil {
		return continueRequestHeaders()
	}
	return immediate(r, "extauthz_idempotency")
}

func requestBodyReply(r *reply) *extprocv3.ProcessingResponse {
	if r == nil {
		return continueRequestBody()
	}
	return immediate(r, "extauthz_idempotency")
}

// immediate answers the client with r (binary-safe: body and header values
// are bytes). details becomes Envoy's %RESPONSE_CODE_DETAILS%.
func immediate(r *reply, details string) *extprocv3.ProcessingResponse {
	ir := &extprocv3.ImmediateResponse{
		Status:  &typev3.HttpStatus{Code: typev3.StatusCode(r.status)},
		Headers: &extprocv3.HeaderMutation{},
		Body:    r.body,
		Details: details,
	}
	for _, h := range r.headers {
		ir.Headers.SetHeaders = append(ir.Headers.SetHeaders, &corev3.HeaderValueOption{
			Header:       &corev3.HeaderValue{Key: h[0], RawValue: []byte(h[1])},
			AppendAction: corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD,
		})
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: ir}}
}

// responseFlags is Envoy's response.flags attribute: a bit per core flag.
type responseFlags uint64

// The bits of response.flags (Envoy's CoreResponseFlag order) this package
// reads, and their short names in access logs.
var flagBits = map[string]uint{
	"UH": 1, "UT": 2, "LR": 3, "UR": 4, "UF": 5, "UC": 6, "UO": 7, "NR": 8, "FI": 10,
	"RL": 11, "UAEX": 12, "RLSE": 13, "DC": 14, "URX": 15, "NC": 24, "DF": 26,
}

// neverForwardedFlags mark local replies made before the request reached
// an upstream: connection failure (with or without retries, URX comes with
// UF then), no healthy host, overflow, no route or cluster, DNS failure,
// and denials of filters placed after ext_proc.
var neverForwardedFlags = []string{"UF", "UH", "UO", "NR", "NC", "DF", "RL", "UAEX", "RLSE", "FI"}

// flagsOf reads response.flags: a number (the bit vector Envoy's CEL
// attribute yields) or, leniently, a comma-separated list of short names.
func flagsOf(v *structpb.Value) responseFlags {
	switch x := v.GetKind().(type) {
	case *structpb.Value_NumberValue:
		if x.NumberValue >= 0 && x.NumberValue < math.MaxUint32 {
			return responseFlags(x.NumberValue)
		}
	case *structpb.Value_StringValue:
		var f responseFlags
		for _, name := range strings.Split(x.StringValue, ",") {
			if bit, ok := flagBits[strings.TrimSpace(name)]; ok {
				f |= 1 << bit
			}
		}
		return f
	}
	return 0
}

func (f responseFlags) has(name string) bool { return f&(1<<flagBits[name]) != 0 }

// neverForwarded reports whether the flags say the request never reached
// an upstream.
func (f responseFlags) neverForwarded() bool {
	for _, n := range neverForwardedFlags {
		if f.has(n) {
			return true
		}
	}
	return false
}
