package authz

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
	"github.com/extauthz/extauthz/pkg/ratelimit/inflight"
	inflightmem "github.com/extauthz/extauthz/pkg/ratelimit/inflight/memstore"
)

const inFlightPolicy = `
http:
  tenant: {header: x-tenant-id}
  exempt: {path_prefixes: [/one/healthz]}
  routes:
    - {name: reports, path_prefix: /reports, max_in_flight: 2, in_flight_ttl: 9s}
    - {name: one, path_prefix: /one, max_in_flight: 1, in_flight_ttl: 9s, header_style: none}
`

// startInFlight is the ext_authz + ext_proc harness with a memory
// in-flight store on the harness's manual clock (or store, when given).
func startInFlight(t *testing.T, store inflight.Store) *idemEnv {
	t.Helper()
	var e *idemEnv
	if store == nil {
		store = inflightmem.New(inflightmem.Config{Now: func() time.Time {
			if e == nil { // New reads the clock before the harness exists
				return envoytest.T0
			}
			return e.clock.Now()
		}})
	}
	e = startIdemStore(t, inFlightPolicy, nil, WithInFlight(store))
	return e
}

// get is a GET of tenant through ext_authz.
func (e *idemEnv) get(t *testing.T, path, tenant string) *authv3.CheckResponse {
	t.Helper()
	return e.check(t, checkReq("GET", path, nil, "x-tenant-id", tenant))
}

// wantSlot checks an admitted request carrying an in-flight slot and
// returns the metadata as ext_proc receives it.
func wantSlot(t *testing.T, resp *authv3.CheckResponse) *corev3.Metadata {
	t.Helper()
	if resp.GetOkResponse() == nil || resp.GetStatus().GetCode() != int32(codes.OK) {
		t.Fatalf("denied %d %s, want OK", resp.GetDeniedResponse().GetStatus().GetCode(), resp.GetDeniedResponse().GetBody())
	}
	f := resp.GetDynamicMetadata().GetFields()[envoy.MetadataInFlight].GetStructValue().GetFields()
	if f[mdSlot].GetStringValue() == "" || f[mdSlotKey].GetStringValue() == "" || f[mdSlotTTL].GetNumberValue() != 9000 {
		t.Fatalf("in-flight metadata %v, want key, slot and ttl_ms 9000", f)
	}
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{envoy.ExtAuthzNamespace: resp.GetDynamicMetadata()}}
}

// wantTooMany checks the 429 of a full route: problem, RateLimit-Policy
// in concurrent-requests and Retry-After.
func wantTooMany(t *testing.T, resp *authv3.CheckResponse, policyField string) {
	t.Helper()
	wantDenied(t, resp, 429, ProblemTooManyInFlight)
	if got := deniedHeader(resp, "RateLimit-Policy"); policyField == "" && len(got) != 0 || policyField != "" && (len(got) != 1 || got[0] != policyField) {
		t.Errorf("RateLimit-Policy %v, want %q", got, policyField)
	}
	ra := deniedHeader(resp, "Retry-After")
	if n, err := strconv.Atoi(first(ra)); len(ra) != 1 || err != nil || n < 1 {
		t.Errorf("Retry-After %v, want one integer >= 1", ra)
	}
	var p Problem
	_ = json.Unmarshal([]byte(resp.GetDeniedResponse().GetBody()), &p)
	if p.Title == "" || p.Detail == "" {
		t.Errorf("problem %+v, want title and detail", p)
	}
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// openWith starts a stream for md, as Envoy does after ext_authz admits.
func (e *idemEnv) openWith(t *testing.T, md *corev3.Metadata) *stream {
	t.Helper()
	s := e.open(t)
	s.send(reqHeaders(filterv3.ProcessingMode_NONE, true, md, ":method", "GET", ":path", "/reports"))
	return s
}

func (e *idemEnv) inFlight(t *testing.T, api, outcome string) float64 {
	t.Helper()
	return envoytest.CounterValue(t, e.reg, "extauthz_inflight_total", map[string]string{"api": api, "outcome": outcome})
}

// waitReleased waits until ext_proc has released n slots: a stream that
// ends by cancellation is finished by the server after the client left.
func (e *idemEnv) waitReleased(t *testing.T, n float64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for e.inFlight(t, envoy.APIExtProc, envoy.InFlightReleased) < n {
		if time.Now().After(deadline) {
			t.Fatalf("ext_proc released %v slots, want %v", e.inFlight(t, envoy.APIExtProc, envoy.InFlightReleased), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// N slots admit N requests and the next gets 429; each way a stream ends
// frees exactly one slot, once (the stream's end after the response's end
// releases nothing more).
func TestMaxInFlightEachEndFreesOneSlot(t *testing.T) {
	ends := []struct {
		name string
		end  func(e *idemEnv, s *stream, cancel context.CancelFunc)
	}{
		{"response complete", func(_ *idemEnv, s *stream, _ context.CancelFunc) {
			s.upstream(200, []byte("done"), viaUpstream, 0)
		}},
		{"response headers only", func(_ *idemEnv, s *stream, _ context.CancelFunc) {
			s.upstream(204, nil, viaUpstream, 0)
		}},
		{"local reply", func(_ *idemEnv, s *stream, _ context.CancelFunc) {
			s.upstream(504, []byte("upstream request timeout"), "upstream_response_timeout", flag("UT"))
		}},
		{"upstream reset, stream closed without a response", func(_ *idemEnv, s *stream, _ context.CancelFunc) {
			s.close()
		}},
		{"client gone, stream cancelled", func(_ *idemEnv, _ *stream, cancel context.CancelFunc) {
			cancel()
		}},
	}
	for _, end := range ends {
		t.Run(end.name, func(t *testing.T) {
			e := startInFlight(t, nil)
			a, b := wantSlot(t, e.get(t, "/reports/1", "acme")), wantSlot(t, e.get(t, "/reports/2", "acme"))
			wantTooMany(t, e.get(t, "/reports/3", "acme"), `"reports-in-flight";q=2;qu="concurrent-requests"`)
			sa, cancel := e.openCancel(t, a)
			e.openWith(t, b) // still running
			end.end(e, sa, cancel)
			e.waitReleased(t, 1)
			wantSlot(t, e.get(t, "/reports/4", "acme"))
			wantTooMany(t, e.get(t, "/reports/5", "acme"), `"reports-in-flight";q=2;qu="concurrent-requests"`)
			if got := e.inFlight(t, envoy.APIExtProc, envoy.InFlightReleased); got != 1 {
				t.Errorf("released %v, want 1", got)
			}
			if got := e.inFlight(t, envoy.APIExtAuthz, envoy.InFlightOverLimit); got != 2 {
				t.Errorf("over_limit %v, want 2", got)
			}
		})
	}
}

// openCancel is openWith on a stream the test can cancel (client gone).
func (e *idemEnv) openCancel(t *testing.T, md *corev3.Metadata) (*stream, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c, err := e.proc.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := &stream{t: t, c: c}
	s.send(reqHeaders(filterv3.ProcessingMode_NONE, true, md, ":method", "GET", ":path", "/reports"))
	return s, cancel
}

// A slot whose stream never ends (its replica crashed) frees after its
// ttl, and not before; a renewed slot outlives its first ttl.
func TestMaxInFlightSlotExpiresAndRenews(t *testing.T) {
	e := startInFlight(t, nil)
	// Taken by a request whose ext_proc stream never starts: not renewed.
	wantSlot(t, e.get(t, "/one", "acme"))
	e.clock.Advance(8 * time.Second)
	wantTooMany(t, e.get(t, "/one", "acme"), "")
	e.clock.Advance(2 * time.Second)
	md := wantSlot(t, e.get(t, "/one", "acme"))

	// Held by a live stream: each renewal extends it by the ttl. The
	// second tick is taken only once the first renewal is done.
	e.openWith(t, md)
	e.clock.Advance(6 * time.Second)
	e.ticks <- e.clock.Now()
	e.ticks <- e.clock.Now()
	e.clock.Advance(6 * time.Second) // 12s after Acquire, 6s after renewal
	wantTooMany(t, e.get(t, "/one", "acme"), "")
	if got := e.inFlight(t, envoy.APIExtProc, envoy.InFlightRenewError); got != 0 {
		t.Errorf("renew errors %v, want 0", got)
	}
}

// Two identities never share slots; a route without max_in_flight takes none.
func TestMaxInFlightPerIdentity(t *testing.T) {
	e := startInFlight(t, nil)
	wantSlot(t, e.get(t, "/one", "acme"))
	wantTooMany(t, e.get(t, "/one", "acme"), "")
	wantSlot(t, e.get(t, "/one", "globex"))
	wantSlot(t, e.get(t, "/reports", "acme")) // another route: its own slots
	if got := e.inFlight(t, envoy.APIExtAuthz, envoy.InFlightAcquired); got != 3 {
		t.Errorf("acquired %v, want 3", got)
	}
}

// downInFlight is an in-flight store whose backend is down.
type downInFlight struct{ inflight.Store }

func (downInFlight) Acquire(context.Context, string, int, time.Duration) (inflight.Slot, inflight.Result, error) {
	return "", inflight.Result{}, errStoreDown
}

// A failing store is answered like a failing rate-limit store: an error
// (Unavailable), so Envoy's failure_mode_allow decides; counted.
func TestMaxInFlightStoreDown(t *testing.T) {
	e := startInFlight(t, downInFlight{})
	_, err := e.authz.Check(context.Background(), checkReq("GET", "/one", nil, "x-tenant-id", "acme"))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("Check error %v, want Unavailable", err)
	}
	if got := e.inFlight(t, envoy.APIExtAuthz, envoy.InFlightError); got != 1 {
		t.Errorf("errors %v, want 1", got)
	}
}

// A request that takes a slot but is then refused by the Idempotency-Key
// checks never runs: its slot is released at once.
func TestMaxInFlightReleasedWhenRefusedLater(t *testing.T) {
	var e *idemEnv
	store := inflightmem.New(inflightmem.Config{Now: func() time.Time { return envoytest.T0 }})
	e = startIdemStore(t, `
http:
  tenant: {header: x-tenant-id}
  routes:
    - {name: pay, path_prefix: /pay, max_in_flight: 1, idempotency: {key_required: true}}
`, nil, WithInFlight(store))
	wantDenied(t, e.post(t, "/pay", "acme", "", []byte("{}")), 400, ProblemKeyMissing)
	md := wantLease(t, e.post(t, "/pay", "acme", "k1", []byte("{}")), envoy.ActionLease)
	if md.GetFilterMetadata()[envoy.ExtAuthzNamespace].GetFields()[envoy.MetadataInFlight] == nil {
		t.Fatal("no in-flight slot beside the lease")
	}
	wantDenied(t, e.post(t, "/pay", "acme", "k2", []byte("{}")), 429, ProblemTooManyInFlight)
}

// TestMaxInFlightExemptTakesNoSlot: a request the policy exempts (a health
// check) is admitted without a slot while the caller's slots are all held,
// and takes none of them.
func TestMaxInFlightExemptTakesNoSlot(t *testing.T) {
	e := startInFlight(t, nil)
	wantSlot(t, e.get(t, "/one/a", "acme"))
	resp := e.get(t, "/one/healthz", "acme")
	if resp.GetOkResponse() == nil {
		t.Fatalf("exempt request denied %d %s while the slot is held, want OK",
			resp.GetDeniedResponse().GetStatus().GetCode(), resp.GetDeniedResponse().GetBody())
	}
	if md := resp.GetDynamicMetadata().GetFields()[envoy.MetadataInFlight]; md != nil {
		t.Fatalf("exempt request holds a slot: %v", md)
	}
	wantTooMany(t, e.get(t, "/one/b", "acme"), "")
}

// TestMaxInFlightReleasedAtResponseEnd: the slot is released by the
// response's last message itself, while Envoy keeps the stream open (it
// closes it only when the filter is destroyed, which can be much later):
// not by response headers that announce more, and not again by the
// stream's end.
func TestMaxInFlightReleasedAtResponseEnd(t *testing.T) {
	headers := func(eos bool) *extprocv3.ProcessingRequest {
		return respHeaders(respAttrs(viaUpstream, 0), eos, ":status", "200")
	}
	trailers := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{
		ResponseTrailers: &extprocv3.HttpTrailers{Trailers: hdrs("grpc-status", "0")}}}
	ends := []struct {
		name   string
		before []*extprocv3.ProcessingRequest // the response so far: the request still runs
		last   *extprocv3.ProcessingRequest
	}{
		{"headers with end_of_stream", nil, headers(true)},
		{"body with end_of_stream", []*extprocv3.ProcessingRequest{headers(false)}, respBody([]byte("done"))},
		{"trailers", []*extprocv3.ProcessingRequest{headers(false)}, trailers},
	}
	for _, end := range ends {
		t.Run(end.name, func(t *testing.T) {
			e := startInFlight(t, nil)
			s := e.openWith(t, wantSlot(t, e.get(t, "/one/a", "acme")))
			for _, m := range end.before {
				s.send(m)
			}
			wantTooMany(t, e.get(t, "/one/b", "acme"), "")
			s.send(end.last)
			// The stream is still open, and ext_proc answers a message
			// after its release: only the response's end can have freed it.
			if got := e.inFlight(t, envoy.APIExtProc, envoy.InFlightReleased); got != 1 {
				t.Fatalf("released %v at the response's end, want 1", got)
			}
			wantSlot(t, e.get(t, "/one/c", "acme"))
			s.close()
			if got := e.inFlight(t, envoy.APIExtProc, envoy.InFlightReleased); got != 1 {
				t.Errorf("released %v after the stream closed, want still 1", got)
			}
			wantTooMany(t, e.get(t, "/one/d", "acme"), "")
		})
	}
}
