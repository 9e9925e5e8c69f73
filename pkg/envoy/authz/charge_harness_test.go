package authz

import (
	"context"
	"strconv"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/extauthz/extauthz/internal/testclock"
	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
	"github.com/extauthz/extauthz/pkg/idempotency/memstore"
	"github.com/extauthz/extauthz/pkg/policy"
	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/lockout"
	lockoutmem "github.com/extauthz/extauthz/pkg/ratelimit/lockout/memstore"
)

// chargePolicy is the design's login and token routes (issue 31).
const chargePolicy = `
http:
  identity:
    sources: [{tenant_header: x-tenant-id}]
  exempt:
    headers: {x-internal: "yes"}
  routes:
    - name: login
      path_prefix: /login
      rate_limits:
        - name: login-per-address
          requests_per_unit: 5
          unit: minute
          algorithm: fixed_window
          charge:
            on_status: [401, 403]
            key: {client_address: {xff_trusted_hops: 0}}
            lockout: {initial: 1m, factor: 2, max: 1h}
        - name: login-per-account
          requests_per_unit: 20
          unit: hour
          charge:
            on_status: [4xx]
            key: {json_field: username}
    - name: form-login
      path_prefix: /form-login
      rate_limits:
        - name: per-account
          requests_per_unit: 2
          unit: hour
          charge: {on_status: [401], key: {form_field: username}}
    - name: chat
      path_prefix: /v1/chat
      rate_limits:
        - name: tokens
          requests_per_unit: 1000
          unit: minute
          algorithm: fixed_window
          charge:
            cost: {json_field: usage.total_tokens, default: 0}
            reserve: {header: x-max-tokens, default: 0}
    - name: header-cost
      path_prefix: /h
      rate_limits:
        - {name: tokens, requests_per_unit: 1000, unit: minute, algorithm: fixed_window, charge: {cost: {header: x-usage-tokens, default: 50}}}
    - name: trailer-cost
      path_prefix: /t
      rate_limits:
        - {name: tokens, requests_per_unit: 1000, unit: minute, algorithm: fixed_window, charge: {cost: {trailer: x-usage-tokens, default: 0}, reserve: {default: 100}}}
`

// chargeEnv serves Authz and ExtProc sharing one rate-limit store and one
// lockout store, as two servers of a replica (or of two replicas) do.
type chargeEnv struct {
	clock   *testclock.Clock
	reg     *prometheus.Registry
	metrics *ChargeMetrics
	az      *Authz // the server behind authz, for Explain
	authz   authv3.AuthorizationClient
	proc    extprocv3.ExternalProcessorClient
}

// startCharge serves yaml over the memory stores on a manual clock.
func startCharge(t *testing.T, yaml string) *chargeEnv {
	t.Helper()
	clock := testclock.New(envoytest.T0)
	lo := lockoutmem.New(lockoutmem.Config{Now: clock.Now})
	return startChargeOn(t, yaml, clock, envoytest.NewTestStore(t, clock.Now), lo)
}

// startChargeOn serves yaml over the given stores, with extra options.
func startChargeOn(t *testing.T, yaml string, clock *testclock.Clock, limits ratelimit.Store, lo lockout.Store, extra ...IdempotencyOption) *chargeEnv {
	t.Helper()
	e := &chargeEnv{clock: clock, reg: prometheus.NewRegistry()}
	p := envoytest.WritePolicy(t, yaml)
	src := envoy.PolicyFunc(func() *policy.Policy { return p })
	m, err := envoy.NewMetrics(e.reg)
	if err != nil {
		t.Fatal(err)
	}
	events, err := NewIdempotencyMetrics(e.reg)
	if err != nil {
		t.Fatal(err)
	}
	if e.metrics, err = NewChargeMetrics(e.reg); err != nil {
		t.Fatal(err)
	}
	idem := memstore.New(memstore.Config{Now: clock.Now})
	opts := append([]IdempotencyOption{WithCharges(limits, lo, e.metrics), WithStoreTimeout(5_000_000_000)}, extra...)
	az, err := NewAuthz(limits, idem, src, m, events, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := NewExtProc(idem, src, m, events, opts...)
	if err != nil {
		t.Fatal(err)
	}
	e.az = az
	conn := envoytest.ServeLoopback(t, both{az, ep})
	e.authz = authv3.NewAuthorizationClient(conn)
	e.proc = extprocv3.NewExternalProcessorClient(conn)
	return e
}

// checkFrom is a CheckRequest from a client address.
func checkFrom(addr, method, path string, body []byte, kv ...string) *authv3.CheckRequest {
	req := checkReq(method, path, body, kv...)
	req.Attributes.Source = &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
		SocketAddress: &corev3.SocketAddress{Address: addr, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 40000}}}}}
	return req
}

func (e *chargeEnv) check(t *testing.T, req *authv3.CheckRequest) *authv3.CheckResponse {
	t.Helper()
	resp, err := e.authz.Check(context.Background(), req)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	return resp
}

// admitted checks an OK response and returns its metadata as ext_proc
// receives it (forwarding_namespaces).
func chargeAdmitted(t *testing.T, resp *authv3.CheckResponse) *corev3.Metadata {
	t.Helper()
	if resp.GetOkResponse() == nil || resp.GetStatus().GetCode() != int32(codes.OK) {
		t.Fatalf("denied %d %s, want OK", resp.GetDeniedResponse().GetStatus().GetCode(), resp.GetDeniedResponse().GetBody())
	}
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{envoy.ExtAuthzNamespace: resp.GetDynamicMetadata()}}
}

func (e *chargeEnv) open(t *testing.T) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c, err := e.proc.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &stream{t: t, c: c}
}

// respond plays ext_proc's part of a request ext_authz admitted (wiring
// b): request headers with md, then the response's headers (status and
// kv) and, unless nil, its body in one message; then the stream ends.
func (e *chargeEnv) respond(t *testing.T, md *corev3.Metadata, status int, body []byte, kv ...string) {
	t.Helper()
	s := e.open(t)
	s.send(reqHeaders(filterv3.ProcessingMode_NONE, true, md, ":method", "POST", ":path", "/"))
	s.upstream(status, body, viaUpstream, 0, kv...)
}

// login is one login attempt from addr for user through ext_authz and,
// when admitted, ext_proc with the upstream's status. It returns the
// Check response.
func (e *chargeEnv) login(t *testing.T, addr, user string, status int) *authv3.CheckResponse {
	t.Helper()
	resp := e.check(t, checkFrom(addr, "POST", "/login", []byte(`{"username":"`+user+`","password":"x"}`), "content-type", "application/json"))
	if resp.GetOkResponse() != nil {
		e.respond(t, chargeAdmitted(t, resp), status, nil)
	}
	return resp
}

func (e *chargeEnv) counter(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	return envoytest.CounterValue(t, e.reg, name, labels)
}

func retryAfterSecs(t *testing.T, resp *authv3.CheckResponse) int {
	t.Helper()
	v := deniedHeader(resp, "retry-after")
	if len(v) != 1 {
		t.Fatalf("Retry-After %v, want one", v)
	}
	n, err := strconv.Atoi(v[0])
	if err != nil {
		t.Fatal(err)
	}
	return n
}
