package e2e

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/otlptest"
)

// The extauthz server spans, by the API whose call they are, and the name of
// the span Envoy's gRPC client makes for that call ("async <service>.<method>
// egress", a child of the request's "ingress" span).
var tracedAPIs = []struct{ server, egress string }{
	{"envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", "async envoy.service.ratelimit.v3.RateLimitService.ShouldRateLimit egress"},
	{"envoy.service.auth.v3.Authorization/Check", "async envoy.service.auth.v3.Authorization.Check egress"},
	{"envoy.service.ext_proc.v3.ExternalProcessor/Process", "async envoy.service.ext_proc.v3.ExternalProcessor.Process egress"},
}

// clientTrace and clientSpan make the traceparent a client sends.
const (
	clientTrace = "0af7651916cd43dd8448eb211c80319c"
	clientSpan  = "b7ad6b7169203331"
)

// TestEnvoyTracing runs envoy/front-proxy.yaml with tracing on both sides and
// one GET /orders per case: the route calls all three APIs (RLS, ext_authz
// Check, an ext_proc stream).
func TestEnvoyTracing(t *testing.T) {
	t.Parallel()
	t.Run("envoy_traces", testEnvoyTraces)
	t.Run("envoy_does_not_trace", testEnvoyDoesNotTrace)
}

// Envoy's OpenTelemetry tracer on (random_sampling 100): for each of its
// gRPC calls Envoy makes a client span under the request's ingress span
// and sends it as traceparent in the call's metadata; every extauthz
// server span is that span's child, in Envoy's trace. Measured with
// Envoy 1.40 for RLS, ext_authz and ext_proc alike.
func testEnvoyTraces(t *testing.T) {
	t.Parallel()
	recv := otlptest.Start(t, otlptest.GRPC)
	s := newStack(t, tracingOpts(recv, true))
	cases := []struct {
		name        string
		traceparent string
	}{
		{"envoy_starts_the_trace", ""},
		{"client_traceparent", "00-" + clientTrace + "-" + clientSpan + "-01"},
	}
	for i, c := range cases {
		path := fmt.Sprintf("/orders?trace=%s", uniq(c.name))
		h := map[string]string{"x-tenant-id": uniq("trace")}
		if c.traceparent != "" {
			h["traceparent"] = c.traceparent
		}
		if r := s.do(t, req{path: path, header: h}); r.status != http.StatusOK {
			t.Fatalf("%s: GET %s: got %s, want 200", c.name, path, r)
		}
		// Each request ends 4 Envoy spans (ingress and 3 egress) and 3
		// extauthz server spans, wherever they land.
		spans := waitSpans(t, recv, 4*(i+1), 3*(i+1))
		ingress, err := ingressSpan(spans, path)
		if err != nil {
			t.Fatalf("%s: %v\n%s", c.name, err, dump(spans))
		}
		if c.traceparent != "" && (ingress.TraceID() != clientTrace || ingress.ParentSpanID() != clientSpan) {
			t.Errorf("%s: Envoy's ingress span is in trace %s under %s, want the client's %s under %s",
				c.name, ingress.TraceID(), ingress.ParentSpanID(), clientTrace, clientSpan)
		}
		for _, api := range tracedAPIs {
			if err := childOfEgress(spans, ingress, api.server, api.egress); err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
		}
		if t.Failed() {
			t.Fatalf("spans:\n%s", dump(spans))
		}
	}
}

// Envoy without a tracer: the client's traceparent reaches ext_authz and
// ext_proc only in the request headers, and extauthz's spans are the
// client span's children; the RLS call carries no headers, so its span
// starts a trace of its own.
func testEnvoyDoesNotTrace(t *testing.T) {
	t.Parallel()
	recv := otlptest.Start(t, otlptest.GRPC)
	s := newStack(t, tracingOpts(recv, false))
	path := "/orders?trace=" + uniq("headers")
	h := map[string]string{"x-tenant-id": uniq("trace"), "traceparent": "00-" + clientTrace + "-" + clientSpan + "-01"}
	if r := s.do(t, req{path: path, header: h}); r.status != http.StatusOK {
		t.Fatalf("GET %s: got %s, want 200", path, r)
	}
	spans := waitSpans(t, recv, 0, 3)
	for _, sp := range spans {
		if sp.Service() != "extauthz" {
			t.Errorf("span %q from %q: Envoy has no tracer here", sp.GetName(), sp.Service())
		}
	}
	for _, api := range tracedAPIs {
		sp, err := one(spans, "extauthz", api.server, "")
		if err != nil {
			t.Error(err)
			continue
		}
		wantTrace, wantParent := clientTrace, clientSpan
		if strings.Contains(api.server, "ratelimit") {
			wantParent = "" // a root span; its trace ID is random
			if sp.TraceID() == clientTrace {
				t.Errorf("%s is in the client's trace: the RLS call has no headers to take it from", api.server)
			}
		} else if sp.TraceID() != wantTrace {
			t.Errorf("%s in trace %s, want the client's %s", api.server, sp.TraceID(), wantTrace)
		}
		if sp.ParentSpanID() != wantParent {
			t.Errorf("%s has parent %q, want %q", api.server, sp.ParentSpanID(), wantParent)
		}
	}
	if t.Failed() {
		t.Fatalf("spans:\n%s", dump(spans))
	}
}

// tracingOpts is a one-replica front-proxy stack exporting to recv; Envoy
// traces when envoyTraces. extauthz exports its batches every 50ms.
func tracingOpts(recv *otlptest.Receiver, envoyTraces bool) stackOpts {
	o := stackOpts{replicas: 1, env: []string{
		"EXTAUTHZ_OTLP_ENDPOINT=http://" + recv.Addr, "EXTAUTHZ_OTLP_PROTOCOL=grpc", "OTEL_BSP_SCHEDULE_DELAY=50",
	}}
	if envoyTraces {
		o.otlp = recv.Addr
	}
	return o
}

// waitSpans polls recv until Envoy's spans number at least envoy and
// extauthz's server spans at least extauthz, for at most 20s.
func waitSpans(t *testing.T, recv *otlptest.Receiver, envoy, extauthz int) []otlptest.Span {
	t.Helper()
	var spans []otlptest.Span
	err := waitFor(nil, 20*time.Second, func() error {
		spans = recv.Spans()
		var e, x int
		for _, sp := range spans {
			switch {
			case sp.Service() == "envoy":
				e++
			case sp.Service() == "extauthz" && sp.GetKind().String() == "SPAN_KIND_SERVER":
				x++
			}
		}
		if e < envoy || x < extauthz {
			return fmt.Errorf("%d Envoy spans (want %d), %d extauthz server spans (want %d)", e, envoy, x, extauthz)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("spans: %v\n%s", err, dump(spans))
	}
	return spans
}

// ingressSpan is Envoy's server span of the request for path.
func ingressSpan(spans []otlptest.Span, path string) (otlptest.Span, error) {
	var found []otlptest.Span
	for _, sp := range spans {
		if sp.Service() == "envoy" && sp.GetName() == "ingress" && strings.HasSuffix(sp.Attrs()["http.url"], path) {
			found = append(found, sp)
		}
	}
	if len(found) != 1 {
		return otlptest.Span{}, fmt.Errorf("%d Envoy ingress spans with http.url ending in %s, want 1", len(found), path)
	}
	if k := found[0].GetKind().String(); k != "SPAN_KIND_SERVER" {
		return otlptest.Span{}, fmt.Errorf("Envoy's ingress span is %s, want SPAN_KIND_SERVER", k)
	}
	return found[0], nil
}

// childOfEgress checks that ingress's trace has exactly one extauthz span
// named server, whose parent is the one Envoy span named egress in that
// trace, itself a client span and a child of ingress.
func childOfEgress(spans []otlptest.Span, ingress otlptest.Span, server, egress string) error {
	trace := ingress.TraceID()
	out, err := one(spans, "extauthz", server, trace)
	if err != nil {
		return err
	}
	call, err := one(spans, "envoy", egress, trace)
	if err != nil {
		return err
	}
	if k := call.GetKind().String(); k != "SPAN_KIND_CLIENT" || call.ParentSpanID() != ingress.SpanID() {
		return fmt.Errorf("Envoy's %q is %s under %s, want SPAN_KIND_CLIENT under the ingress span %s", egress, k, call.ParentSpanID(), ingress.SpanID())
	}
	if out.ParentSpanID() != call.SpanID() {
		return fmt.Errorf("%s has parent %s, want Envoy's %q %s", server, out.ParentSpanID(), egress, call.SpanID())
	}
	return nil
}

// one returns the single span of service named name in trace ("" = any).
func one(spans []otlptest.Span, service, name, trace string) (otlptest.Span, error) {
	var found []otlptest.Span
	for _, sp := range spans {
		if sp.Service() == service && sp.GetName() == name && (trace == "" || sp.TraceID() == trace) {
			found = append(found, sp)
		}
	}
	if len(found) != 1 {
		return otlptest.Span{}, fmt.Errorf("%d %s spans %q in trace %q, want 1", len(found), service, name, trace)
	}
	return found[0], nil
}

// dump lists spans one a line, sorted by trace, for failure messages.
func dump(spans []otlptest.Span) string {
	lines := make([]string, 0, len(spans))
	for _, sp := range spans {
		lines = append(lines, fmt.Sprintf("trace=%s span=%s parent=%-16s %s %s %q", sp.TraceID(), sp.SpanID(), sp.ParentSpanID(),
			sp.Service(), strings.TrimPrefix(sp.GetKind().String(), "SPAN_KIND_"), sp.GetName()))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
