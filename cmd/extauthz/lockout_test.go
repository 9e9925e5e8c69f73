package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/admin"
	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/authz"
	"github.com/extauthz/extauthz/pkg/policy"
	"github.com/extauthz/extauthz/pkg/ratelimit/lockout"
)

// loginPolicy is a login route limited by its failures per address, with
// a lockout; the windows and the lockout outlast the test.
const loginPolicy = `
http:
  routes:
    - name: login
      path_prefix: /login
      rate_limits:
        - name: login-per-address
          requests_per_unit: 3
          unit: hour
          algorithm: fixed_window
          charge:
            on_status: [401]
            key: {client_address: {}}
            lockout: {initial: 1h}
`

// chargeReplica is one replica's ext_authz and ext_proc, built as the
// process builds them (newRedisStore, newIdempotency, newServices).
type chargeReplica struct {
	authz authv3.AuthorizationClient
	proc  extprocv3.ExternalProcessorClient
	reg   *prometheus.Registry
}

func startChargeReplica(t *testing.T, cfg Config) *chargeReplica {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(loginPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := policy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	r := &chargeReplica{reg: prometheus.NewRegistry()}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	store, err := newStore(t.Context(), cfg, storeDeps{Registerer: r.reg, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	if w, ok := store.(warmer); ok {
		if err := w.Warm(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	idem, err := newIdempotency(cfg, store, r.reg, log)
	if err != nil {
		t.Fatal(err)
	}
	m, err := envoy.NewMetrics(r.reg)
	if err != nil {
		t.Fatal(err)
	}
	services, err := newServices(cfg, store, envoy.PolicyFunc(func() *policy.Policy { return p }), m, idem, log)
	if err != nil {
		t.Fatal(err)
	}
	g, _ := newGRPCServer(services)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	r.authz, r.proc = authv3.NewAuthorizationClient(conn), extprocv3.NewExternalProcessorClient(conn)
	return r
}

// check is a login attempt's Check from addr; it returns the answer, how
// long the call took and the gRPC error.
func (r *chargeReplica) check(t *testing.T, addr string) (*authv3.CheckResponse, time.Duration, error) {
	t.Helper()
	req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: addr, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 40000}}}}},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Method: "POST", Path: "/login", Headers: map[string]string{":method": "POST", ":path": "/login"}}},
	}}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	begin := time.Now()
	resp, err := r.authz.Check(ctx, req)
	return resp, time.Since(begin), err
}

// respond plays ext_proc's part of an admitted request (wiring b): the
// plan from ext_authz's metadata, then the upstream's status.
func (r *chargeReplica) respond(t *testing.T, admitted *authv3.CheckResponse, status string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s, err := r.proc.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	md := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{envoy.ExtAuthzNamespace: admitted.GetDynamicMetadata()}}
	hdrs := func(kv ...string) *corev3.HeaderMap {
		m := &corev3.HeaderMap{}
		for i := 0; i+1 < len(kv); i += 2 {
			m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
		}
		return m
	}
	attrs := map[string]*structpb.Struct{"envoy.filters.http.ext_proc": {Fields: map[string]*structpb.Value{
		"response.code_details": structpb.NewStringValue("via_upstream"), "response.flags": structpb.NewNumberValue(0)}}}
	for _, req := range []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: hdrs(":method", "POST", ":path", "/login"), EndOfStream: true}}, MetadataContext: md},
		{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
			Headers: hdrs(":status", status), EndOfStream: true}}, Attributes: attrs},
	} {
		if err := s.Send(req); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	_ = s.CloseSend()
	_, _ = s.Recv() // the server ends the stream: the charge is done
}

// problemType is the problem+json type of a denied Check.
func problemType(t *testing.T, resp *authv3.CheckResponse) string {
	t.Helper()
	var p authz.Problem
	if err := json.Unmarshal([]byte(resp.GetDeniedResponse().GetBody()), &p); err != nil {
		t.Fatalf("denied body %q: %v", resp.GetDeniedResponse().GetBody(), err)
	}
	return p.Type
}

// outageConfig is a Redis configuration whose breaker opens after two
// failures and stays open for the test; a hung call waits 1s, far longer
// than an in-process answer takes even on a loaded machine, so "did not
// wait for the timeout" is told apart by half of it.
func outageConfig(t *testing.T, url, mode string) Config {
	t.Helper()
	cfg := defaultConfig(t)
	cfg.RedisURL, cfg.FailureMode, cfg.FallbackReplicas = url, mode, 1
	cfg.RedisBreakerThreshold, cfg.RedisBreakerPause = 2, time.Hour
	cfg.IdempotencyStoreTimeout, cfg.RedisReadTimeout = time.Second, time.Second
	return cfg
}

// TestChargedLimitsWithRedisHung: a charged limit with a lockout while
// Redis hangs (SIGSTOP). With EXTAUTHZ_FAILURE_MODE=open, once the
// breakers are open every check is decided at once by the in-process
// stores, not after the store timeout nor as an error; three failed logins
// spend the budget and trip the lockout in memory, and the lockout holds on
// this replica (429 locked-out) while another address is admitted.
func TestChargedLimitsWithRedisHung(t *testing.T) {
	srv := redistest.Standalone(t)
	r := startChargeReplica(t, outageConfig(t, srv.URL, "open"))
	if resp, _, err := r.check(t, "192.0.2.1"); err != nil || resp.GetOkResponse() == nil {
		t.Fatalf("with Redis up: %v, %v; want OK", resp.GetDeniedResponse(), err)
	}
	srv.Pause()
	defer srv.Resume()

	for i := range 3 { // the first calls wait for the timeout and open the breakers
		if _, took, _ := r.check(t, "192.0.2.9"); took > 5*time.Second {
			t.Fatalf("call %d took %v", i, took)
		}
	}
	for i := range 3 {
		resp, took, err := r.check(t, "192.0.2.1")
		if err != nil || resp.GetOkResponse() == nil {
			t.Fatalf("attempt %d with Redis hung: %v, %v; want OK (fail-open)", i, resp.GetDeniedResponse(), err)
		}
		if took > 500*time.Millisecond {
			t.Errorf("attempt %d took %v with the breakers open, want no wait for the 1s store timeout", i, took)
		}
		r.respond(t, resp, "401")
	}
	resp, took, err := r.check(t, "192.0.2.1")
	if err != nil || resp.GetStatus().GetCode() != int32(codes.ResourceExhausted) || problemType(t, resp) != authz.ProblemLockedOut {
		t.Fatalf("after 3 failed logins with Redis hung: %v, %v; want 429 locked-out", resp.GetDeniedResponse(), err)
	}
	if took > 500*time.Millisecond {
		t.Errorf("the locked-out answer took %v, want no wait for the 1s store timeout", took)
	}
	if resp, _, err := r.check(t, "192.0.2.2"); err != nil || resp.GetOkResponse() == nil {
		t.Fatalf("another address: %v, %v; want OK", resp.GetDeniedResponse(), err)
	}
}

// TestChargedLimitsClosedWithRedisDown: with EXTAUTHZ_FAILURE_MODE=closed
// and Redis stopped, a login (a charged limit with a lockout) is refused
// with a 429 and Retry-After 1, as closed mode refuses every limit, never
// with an error that Envoy's failure_mode_allow would turn into "admit".
func TestChargedLimitsClosedWithRedisDown(t *testing.T) {
	srv := redistest.Standalone(t)
	r := startChargeReplica(t, outageConfig(t, srv.URL, "closed"))
	srv.Stop()
	for i := range 4 {
		resp, _, err := r.check(t, "192.0.2.1")
		if err != nil || resp.GetStatus().GetCode() != int32(codes.ResourceExhausted) {
			t.Fatalf("attempt %d with Redis down: %v, %v; want 429", i, resp.GetDeniedResponse(), err)
		}
		for _, h := range resp.GetDeniedResponse().GetHeaders() {
			if h.GetHeader().GetKey() == "retry-after" && h.GetHeader().GetValue() != "1" {
				t.Errorf("Retry-After %q, want 1", h.GetHeader().GetValue())
			}
		}
	}
}

// TestAdminExplainShowsLockouts: the admin API's explain, built as the
// process builds it, reads a charged limit's lockout from the lockout
// store the servers use: a key locked through the store shows its time
// left and would_answer 429.
func TestAdminExplainShowsLockouts(t *testing.T) {
	cfg := defaultConfig(t)
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(loginPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := policy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	reg, log := prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil))
	store, err := newStore(t.Context(), cfg, storeDeps{Registerer: reg, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	idem, err := newIdempotency(cfg, store, reg, log)
	if err != nil {
		t.Fatal(err)
	}
	api, err := newAdminAPI(cfg, adminDeps{limits: store, idem: idem, reg: reg, log: log,
		policies: envoy.PolicyFunc(func() *policy.Policy { return p })})
	if err != nil {
		t.Fatal(err)
	}
	explain := func() admin.HTTPExplanation {
		t.Helper()
		req := httptest.NewRequest("POST", "/v1/explain", strings.NewReader(
			`{"http": {"method": "POST", "path": "/login", "source_address": "192.0.2.1"}}`))
		req.Host = "127.0.0.1:9003"
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		var hx admin.HTTPExplanation
		if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &hx) != nil || len(hx.Charged) != 1 || hx.Charged[0].Lockout == nil {
			t.Fatalf("explain = %d %s, want the charged limit and its lockout", rec.Code, rec.Body)
		}
		return hx
	}
	hx := explain()
	if hx.WouldAnswer != "admit" || hx.Charged[0].Lockout.LockedForSeconds != 0 {
		t.Fatalf("before the trip: %+v", hx)
	}
	if _, _, err := idem.charges.lockouts.Trip(t.Context(), hx.Charged[0].Counter, lockout.Policy{Initial: time.Hour, Factor: 2, Max: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if hx = explain(); hx.WouldAnswer != "429" || hx.Charged[0].Lockout.LockedForSeconds != 3600 {
		t.Fatalf("after the trip: %s, %+v; want 429, locked for 3600s", hx.WouldAnswer, hx.Charged[0].Lockout)
	}
}
