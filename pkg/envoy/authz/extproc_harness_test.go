package authz

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/extauthz/extauthz/internal/testclock"
	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/idempotency/memstore"
	"github.com/extauthz/extauthz/pkg/policy"
)

// idemPolicy is the HTTP policy of the ext_authz / ext_proc tests.
const idemPolicy = `
http:
  tenant: {header: x-tenant-id, principal: true, context_extension: tenant, default: public}
  exempt:
    path_prefixes: [/limited/health]
    headers: {x-internal: "yes"}
  routes:
    - name: strict
      path_prefix: /strict
      idempotency: {key_required: true, failure_mode: closed}
    - name: orders
      path_prefix: /orders
      idempotency:
        key_required: true
        lease_ttl: 30s
        record_ttl: 1h
        max_body_bytes: 4096
        store_statuses: ["2xx", "409"]
        replay_headers: [content-type, location, x-custom, set-cookie-not]
        fingerprint_headers: [x-plan]
    - name: optional
      path_prefix: /optional
      idempotency: {}
    - name: limited
      path_prefix: /limited
      rate_limits: [{requests_per_unit: 2, unit: minute, name: per-tenant}]
      idempotency: {key_required: true}
`

// idemEnv serves Authz and ExtProc on one loopback gRPC server, over a
// memory idempotency store on a manual clock.
type idemEnv struct {
	clock  *envoytest.Clock
	store  *flakyStore
	limits *envoytest.RecordingStore
	reg    *prometheus.Registry
	events *IdempotencyMetrics
	authz  authv3.AuthorizationClient
	proc   extprocv3.ExternalProcessorClient
	ticks  chan time.Time // drives lease renewals
	// latency is shared by both servers, on the manual clock.
	latency *RouteLatency
}

// flakyStore fails every call while fail is set (a Redis outage), and
// blocks Begin until its context ends while hang is set (a Redis that
// stopped answering).
type flakyStore struct {
	idempotency.Store
	fail atomic.Bool
	hang atomic.Bool
}

var errStoreDown = errors.New("store down")

func (s *flakyStore) Begin(ctx context.Context, scope, key string, fp idempotency.Fingerprint, t idempotency.TTLs) (idempotency.Outcome, error) {
	if s.fail.Load() {
		return idempotency.Outcome{}, errStoreDown
	}
	if s.hang.Load() {
		<-ctx.Done()
		return idempotency.Outcome{}, ctx.Err()
	}
	return s.Store.Begin(ctx, scope, key, fp, t)
}

func (s *flakyStore) Complete(ctx context.Context, l idempotency.Lease, r idempotency.Response) error {
	if s.fail.Load() {
		return errStoreDown
	}
	return s.Store.Complete(ctx, l, r)
}

// both registers two services on one server.
type both [2]interface{ Register(grpc.ServiceRegistrar) }

func (b both) Register(r grpc.ServiceRegistrar) { b[0].Register(r); b[1].Register(r) }

func startIdem(t *testing.T, yaml string) *idemEnv {
	t.Helper()
	return startIdemStore(t, yaml, nil)
}

// startIdemStore is startIdem over a given store (nil: memory), with
// extra ExtProc options.
func startIdemStore(t *testing.T, yaml string, store idempotency.Store, opts ...IdempotencyOption) *idemEnv {
	t.Helper()
	e := &idemEnv{clock: testclock.New(envoytest.T0), reg: prometheus.NewRegistry(), ticks: make(chan time.Time)}
	e.latency = NewRouteLatency(e.clock.Now)
	opts = append([]IdempotencyOption{WithRouteLatency(e.latency)}, opts...)
	if store == nil {
		store = memstore.New(memstore.Config{Now: e.clock.Now})
	}
	e.store = &flakyStore{Store: store}
	e.limits = &envoytest.RecordingStore{Store: envoytest.NewTestStore(t, e.clock.Now)}
	p := envoytest.WritePolicy(t, yaml)
	src := envoy.PolicyFunc(func() *policy.Policy { return p })
	m, err := envoy.NewMetrics(e.reg)
	if err != nil {
		t.Fatal(err)
	}
	if e.events, err = NewIdempotencyMetrics(e.reg); err != nil {
		t.Fatal(err)
	}
	az, err := NewAuthz(e.limits, e.store, src, m, e.events, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ticker := func(time.Duration) (<-chan time.Time, func()) { return e.ticks, func() {} }
	ep, err := NewExtProc(e.store, src, m, e.events, append(opts, WithRenewTicker(ticker))...)
	if err != nil {
		t.Fatal(err)
	}
	conn := envoytest.ServeLoopback(t, both{az, ep})
	e.authz = authv3.NewAuthorizationClient(conn)
	e.proc = extprocv3.NewExternalProcessorClient(conn)
	return e
}

func (e *idemEnv) event(api string, ev idempotency.Event) float64 { return e.events.Value(api, ev) }

// stream is one ext_proc stream as Envoy drives it: one reply per message.
type stream struct {
	t *testing.T
	c extprocv3.ExternalProcessor_ProcessClient
}

func (e *idemEnv) open(t *testing.T) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c, err := e.proc.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &stream{t: t, c: c}
}

func (s *stream) send(req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	s.t.Helper()
	if err := s.c.Send(req); err != nil {
		s.t.Fatalf("send: %v", err)
	}
	resp, err := s.c.Recv()
	if err != nil {
		s.t.Fatalf("recv: %v", err)
	}
	return resp
}

// close ends the stream as Envoy does when the filter is destroyed, and
// waits for the server to finish it.
func (s *stream) close() {
	s.t.Helper()
	_ = s.c.CloseSend()
	if _, err := s.c.Recv(); err == nil {
		s.t.Fatal("server sent a message after the stream ended")
	}
}

// hdrs builds an ext_proc header map (values as raw_value, as Envoy sends).
func hdrs(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return m
}

// reqHeaders is the first message of a stream; mode is the request body
// mode Envoy announces in protocol_config (wiring a: BUFFERED, b: NONE).
func reqHeaders(mode filterv3.ProcessingMode_BodySendMode, eos bool, md *corev3.Metadata, kv ...string) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{
		Request:         &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hdrs(kv...), EndOfStream: eos}},
		MetadataContext: md,
		ProtocolConfig:  &extprocv3.ProtocolConfiguration{RequestBodyMode: mode, ResponseBodyMode: filterv3.ProcessingMode_BUFFERED},
	}
}

func reqBody(b []byte) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: b, EndOfStream: true}}}
}

// respAttrs are the response attributes Envoy evaluates for ext_proc.
func respAttrs(details string, flags float64) map[string]*structpb.Struct {
	return map[string]*structpb.Struct{"envoy.filters.http.ext_proc": {Fields: map[string]*structpb.Value{
		"response.code_details": structpb.NewStringValue(details),
		"response.flags":        structpb.NewNumberValue(flags),
	}}}
}

func respHeaders(attrs map[string]*structpb.Struct, eos bool, kv ...string) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{
		Request:    &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: hdrs(kv...), EndOfStream: eos}},
		Attributes: attrs,
	}
}

func respBody(b []byte) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: b, EndOfStream: true}}}
}

// flag returns the response.flags bit vector of the named flags.
func flag(names ...string) float64 {
	var f uint64
	for _, n := range names {
		f |= 1 << flagBits[n]
	}
	return float64(f)
}

// immediateOf returns the ImmediateResponse of resp, or nil if it continues.
func immediateOf(resp *extprocv3.ProcessingResponse) *extprocv3.ImmediateResponse {
	return resp.GetImmediateResponse()
}

// irHeader returns the values of name set by an ImmediateResponse.
func irHeader(ir *extprocv3.ImmediateResponse, name string) []string {
	var out []string
	for _, h := range ir.GetHeaders().GetSetHeaders() {
		if h.GetHeader().GetKey() == name {
			out = append(out, string(h.GetHeader().GetRawValue()))
		}
	}
	return out
}
