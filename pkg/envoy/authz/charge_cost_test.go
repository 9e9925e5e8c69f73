package authz

import (
	"strconv"
	"strings"
	"testing"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// costPolicy meters one route in tokens with a default of 40 and a
// reservation from x-max-tokens; the budget is large so that every test
// reads what one request was charged, net, from the metrics.
const costPolicy = `
http:
  routes:
    - name: chat
      path_prefix: /v1/chat
      rate_limits:
        - name: tokens
          requests_per_unit: 100000000
          unit: hour
          algorithm: fixed_window
          charge:
            cost: {json_field: usage.total_tokens, default: 40}
            reserve: {header: x-max-tokens, default: 0}
`

// costStream is one admitted /v1/chat request (x-max-tokens: reserve) as
// ext_proc sees it with response_body_mode STREAMED.
func costStream(t *testing.T, e *chargeEnv, reserve int) *stream {
	t.Helper()
	md := chargeAdmitted(t, e.check(t, checkFrom("192.0.2.1", "POST", "/v1/chat", nil, "x-tenant-id", "acme", "x-max-tokens", strconv.Itoa(reserve))))
	s := e.open(t)
	first := reqHeaders(filterv3.ProcessingMode_NONE, true, md, ":method", "POST", ":path", "/v1/chat")
	first.ProtocolConfig.ResponseBodyMode = filterv3.ProcessingMode_STREAMED
	s.send(first)
	return s
}

func (s *stream) replyHeaders(contentType string) {
	s.t.Helper()
	s.send(respHeaders(respAttrs(viaUpstream, 0), false, ":status", "200", "content-type", contentType))
}

// replyBody sends body in chunks of n bytes (the last with end_of_stream
// when end).
func (s *stream) replyBody(body []byte, n int, end bool) {
	s.t.Helper()
	for len(body) > 0 {
		k := min(n, len(body))
		last := k == len(body)
		s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
			ResponseBody: &extprocv3.HttpBody{Body: body[:k], EndOfStream: last && end}}})
		body = body[k:]
	}
}

// netCharged is what the route's token limit was charged, refunds
// deducted.
func (e *chargeEnv) netCharged(t *testing.T) float64 {
	t.Helper()
	labels := map[string]string{"route": "chat", "limit": "tokens"}
	return e.counter(t, "extauthz_charged_cost_total", labels) - e.counter(t, "extauthz_charge_refunded_total", labels)
}

// bigJSONReply is an OpenAI-style reply of about size bytes whose usage
// comes last, after a long content string and a long array.
func bigJSONReply(size, tokens int) []byte {
	var b strings.Builder
	b.WriteString(`{"id":"chatcmpl-1","choices":[{"index":0,"message":{"role":"assistant","content":"`)
	b.WriteString(strings.Repeat(`word \"quoted\" `, size/2/16))
	b.WriteString(`"},"logprobs":[`)
	for i := 0; b.Len() < size-100; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"usage":{"total_tokens":1},"p":-0.5}`) // a decoy: not at the path
	}
	b.WriteString(`]}],"usage":{"prompt_tokens":12,"total_tokens":` + strconv.Itoa(tokens) + `}}`)
	return []byte(b.String())
}

// A JSON reply of 2 MiB still yields its cost, read as it streams by,
// whatever the chunking.
func TestChargeCostLargeJSONReply(t *testing.T) {
	t.Parallel()
	e := startCharge(t, costPolicy)
	reply := bigJSONReply(2<<20, 777)
	want := 0.0
	for _, chunk := range []int{64 << 10, 1000, 4093, len(reply)} {
		s := costStream(t, e, 0)
		s.replyHeaders("application/json")
		s.replyBody(reply, chunk, true)
		s.close()
		want += 777
		if got := e.netCharged(t); got != want {
			t.Fatalf("chunks of %d: charged %v in all, want %v (777 a reply)", chunk, got, want)
		}
	}
}

// A final server-sent event of 100 KiB (a long last delta with the usage)
// still yields its cost.
func TestChargeCostLargeEvent(t *testing.T) {
	t.Parallel()
	e := startCharge(t, costPolicy)
	big := `data: {"choices":[{"delta":{"content":"` + strings.Repeat("x", 100<<10) + `"}}],"usage":{"total_tokens":555}}` + "\n\n"
	stream := []byte(`data: {"choices":[{"delta":{"content":"hi"}}]}` + "\n\n" + big + "data: [DONE]\n\n")
	want := 0.0
	for _, chunk := range []int{16 << 10, 999, len(stream)} {
		s := costStream(t, e, 0)
		s.replyHeaders("text/event-stream")
		s.replyBody(stream, chunk, true)
		s.close()
		want += 555
		if got := e.netCharged(t); got != want {
			t.Fatalf("chunks of %d: charged %v in all, want %v (555 a reply)", chunk, got, want)
		}
	}
}

// A client that leaves before the usage event pays at least the default,
// and its reservation when that is larger: the upstream did the work.
func TestChargeCostClientGone(t *testing.T) {
	t.Parallel()
	partial := []byte("data: {\"choices\":[{\"delta\":{\"content\":\"hel\"}}]}\n\ndata: {\"choices\":[{\"delta\":")
	tests := []struct {
		name    string
		reserve int
		play    func(s *stream)
		want    float64
	}{
		{"mid-stream, reservation above the default", 300, func(s *stream) {
			s.replyHeaders("text/event-stream")
			s.replyBody(partial, 7, false)
		}, 300},
		{"mid-stream, reservation below the default", 10, func(s *stream) {
			s.replyHeaders("text/event-stream")
			s.replyBody(partial, len(partial), false)
		}, 40},
		{"mid-JSON, usage not yet sent", 300, func(s *stream) {
			s.replyHeaders("application/json")
			s.replyBody(bigJSONReply(200<<10, 9)[:150<<10], 8<<10, false)
		}, 300},
		{"before the response headers", 300, func(*stream) {}, 300},
		// A usage read before the client left is charged when it is
		// more; it may not have been the last word.
		{"usage read, then gone: reservation larger", 300, func(s *stream) {
			s.replyHeaders("text/event-stream")
			s.replyBody([]byte("data: {\"usage\":{\"total_tokens\":120}}\n\ndata: {\"cho"), 9, false)
		}, 300},
		{"usage read, then gone: usage larger", 300, func(s *stream) {
			s.replyHeaders("text/event-stream")
			s.replyBody([]byte("data: {\"usage\":{\"total_tokens\":900}}\n\n"), 9, false)
		}, 900},
		{"after the headers, no body yet", 0, func(s *stream) { s.replyHeaders("application/json") }, 40},
		// A reply that did complete without saying its cost is charged
		// the default, the reservation refunded down to it.
		{"complete reply without usage", 300, func(s *stream) {
			s.replyHeaders("application/json")
			s.replyBody([]byte(`{"error":{"message":"overloaded"}}`), 5, true)
		}, 40},
		{"complete stream without usage", 300, func(s *stream) {
			s.replyHeaders("text/event-stream")
			s.replyBody([]byte("data: {\"choices\":[]}\n\ndata: [DONE]\n\n"), 5, true)
		}, 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := startCharge(t, costPolicy)
			s := costStream(t, e, tt.reserve)
			tt.play(s)
			s.close() // the client is gone: Envoy ends the stream
			if got := e.netCharged(t); got != tt.want {
				t.Errorf("charged %v, want %v", got, tt.want)
			}
		})
	}
}

// A cost limit read from a trailer whose reply ends with its body (no
// trailers follow) is settled then, as complete: the default, not the
// reservation a client gone would keep.
func TestChargeCostTrailerNeverSent(t *testing.T) {
	t.Parallel()
	e := startCharge(t, strings.Replace(costPolicy, "{json_field: usage.total_tokens, default: 40}", "{trailer: x-usage, default: 40}", 1))
	s := costStream(t, e, 300)
	s.replyHeaders("application/json")
	s.replyBody([]byte(`{}`), 2, true)
	s.close()
	if got := e.netCharged(t); got != 40 {
		t.Errorf("charged %v, want the default 40", got)
	}
}

// A compressed reply (a client may ask for one: Accept-Encoding) cannot be
// read for its cost; it is charged as a reply cut short, max(default,
// reservation), never the default alone nor nothing.
func TestChargeCostCompressedReply(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		reserve  int
		want     float64
		encoding []string
	}{{300, 300, []string{"gzip"}}, {0, 40, []string{"identity, br"}}, {10, 40, []string{"identity", "deflate"}}} {
		e := startCharge(t, costPolicy)
		s := costStream(t, e, tt.reserve)
		kv := []string{":status", "200", "content-type", "application/json"}
		for _, v := range tt.encoding {
			kv = append(kv, "content-encoding", v)
		}
		s.send(respHeaders(respAttrs(viaUpstream, 0), false, kv...))
		s.replyBody([]byte("\x1f\x8b\x08\x00 not json"), 4, true)
		s.close()
		if got := e.netCharged(t); got != tt.want {
			t.Errorf("%q, reservation %d: charged %v, want %v", tt.encoding, tt.reserve, got, tt.want)
		}
	}
}

// ext_proc alone (wiring a) reserves at its own check and charges a client
// that leaves the same way: max(default, reservation).
func TestChargeCostClientGoneExtProcAlone(t *testing.T) {
	t.Parallel()
	e := startCharge(t, costPolicy)
	s := e.open(t)
	first := reqHeaders(filterv3.ProcessingMode_NONE, true, nil, ":method", "POST", ":path", "/v1/chat", "x-tenant-id", "acme", "x-max-tokens", "300")
	first.ProtocolConfig.ResponseBodyMode = filterv3.ProcessingMode_STREAMED
	if r := s.send(first); r.GetImmediateResponse() != nil {
		t.Fatalf("refused: %v", r)
	}
	if got := e.netCharged(t); got != 300 {
		t.Fatalf("reserved %v at the check, want 300", got)
	}
	s.replyHeaders("text/event-stream")
	s.replyBody([]byte("data: {\"choices\":[{\"delta\":"), 4, false)
	s.close()
	if got := e.netCharged(t); got != 300 {
		t.Errorf("charged %v, want the reservation 300 (above the default 40)", got)
	}
}
