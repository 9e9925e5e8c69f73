package authz

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// requestHeadersReply answers the request headers: r, or continue, or, when
// the decision was a replay from object storage, continue with the replay
// ticket set and the route cache cleared so that Envoy routes the request
// to the replay endpoint.
func (st *procStream) requestHeadersReply(r *reply) *extprocv3.ProcessingResponse {
	if r != nil || st.mark.ticket == "" {
		return requestHeadersReply(r)
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
		RequestHeaders: &extprocv3.HeadersResponse{Response: st.ticketMutation()}}}
}

// requestBodyReply is requestHeadersReply for a decision on the (BUFFERED)
// body, where a header mutation still applies.
func (st *procStream) requestBodyReply(r *reply) *extprocv3.ProcessingResponse {
	if r != nil || st.mark.ticket == "" {
		return requestBodyReply(r)
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
		RequestBody: &extprocv3.BodyResponse{Response: st.ticketMutation()}}}
}

// ticketMutation sets the ticket and the scope proof (overwriting any
// client copy) and clears the route cache; the stream then only lets the
// replay through.
func (st *procStream) ticketMutation() *extprocv3.CommonResponse {
	m := st.mark
	st.mark, st.replaying = replayMark{}, true
	var set []*corev3.HeaderValueOption
	for _, h := range m.headers() {
		set = append(set, &corev3.HeaderValueOption{
			Header:       &corev3.HeaderValue{Key: h[0], RawValue: []byte(h[1])},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		})
	}
	return &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set}, ClearRouteCache: true}
}

// skipResponseBody lets a replay's response through without sending its
// body here (a stored body may be far larger than any buffer): the mode
// override needs allow_mode_override in the filter's configuration; without
// it Envoy keeps the configured mode and the body chunks are continued.
func skipResponseBody() *extprocv3.ProcessingResponse {
	resp := continueResponseHeaders()
	resp.ModeOverride = &filterv3.ProcessingMode{
		ResponseHeaderMode:  filterv3.ProcessingMode_SKIP,
		ResponseBodyMode:    filterv3.ProcessingMode_NONE,
		ResponseTrailerMode: filterv3.ProcessingMode_SKIP,
	}
	return resp
}

// ticketVerified reports whether the request carries a replay ticket this
// deployment signed and that has not expired: never a client's copy.
func (st *procStream) ticketVerified(h *extprocv3.HttpHeaders) bool {
	v, ok := protoHeaders(h.GetHeaders()).get(HeaderReplayTicket)
	if !ok || st.s.gate.replay == nil {
		return false
	}
	_, err := st.s.gate.replay.verify(v)
	return err == nil
}
