package rlqs

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/extauthz/extauthz/pkg/policy"
	"github.com/extauthz/extauthz/pkg/ratelimit/quota"
)

const testPolicy = `
domain: quota
descriptors:
  - key: tenant
    value: acme
    rate_limit: {unit: second, requests_per_unit: 10}
    descriptors:
      - key: route
        value: orders
        rate_limit: {unit: minute, requests_per_unit: 60}
  - key: tenant
    value: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: tenant
    value: free
    rate_limit: {unlimited: true}
  - key: tenant
    value: trial
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
`

func loadPolicy(t *testing.T) *policy.Policy {
	t.Helper()
	path := filepath.Join(t.TempDir(), "quota.yaml")
	if err := os.WriteFile(path, []byte(testPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := policy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// clock is a test clock advanced by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type harness struct {
	srv   *Server
	reg   *prometheus.Registry
	clock *clock
	conn  *grpc.ClientConn
}

// newHarness serves a Server with a memory store over a real gRPC
// connection (bufconn). store, when not nil, replaces the memory store.
func newHarness(t *testing.T, o Options, store quota.DemandStore, sopts ...grpc.ServerOption) *harness {
	t.Helper()
	h := &harness{reg: prometheus.NewRegistry(), clock: &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	if store == nil {
		var err error
		if store, err = quota.NewMemoryStore(quota.MemoryOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	alloc, err := quota.NewAllocator(store, quota.Config{})
	if err != nil {
		t.Fatal(err)
	}
	p := loadPolicy(t)
	if o.Policy == nil {
		o.Policy = func() *policy.Policy { return p }
	}
	o.Allocator, o.Registerer, o.Now = alloc, h.reg, h.clock.Now
	if o.Tick == 0 {
		o.Tick = time.Hour // tests that want pushes set it
	}
	if h.srv, err = New(o); err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 20)
	g := grpc.NewServer(sopts...)
	h.srv.Register(g)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	h.conn, err = grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) { return lis.Dial() }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.conn.Close() })
	return h
}

type client = grpc.BidiStreamingClient[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse]

func (h *harness) open(t *testing.T) client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	c, err := rlqspb.NewRateLimitQuotaServiceClient(h.conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func usage(id map[string]string, allowed, denied uint64) *rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage {
	return &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
		BucketId: &rlqspb.BucketId{Bucket: id}, NumRequestsAllowed: allowed, NumRequestsDenied: denied,
	}
}

func send(t *testing.T, c client, domain string, us ...*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage) {
	t.Helper()
	if err := c.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: domain, BucketQuotaUsages: us}); err != nil {
		t.Fatal(err)
	}
}

// recv returns the next assignment message's strategies by tenant value.
func recv(t *testing.T, c client) map[string]*typev3.RateLimitStrategy {
	t.Helper()
	resp, err := c.Recv()
	if err != nil {
		t.Fatalf("Recv: %v", err)
	}
	out := map[string]*typev3.RateLimitStrategy{}
	for _, a := range resp.GetBucketAction() {
		qa := a.GetQuotaAssignmentAction()
		if got := qa.GetAssignmentTimeToLive().AsDuration(); got != 11*time.Second {
			t.Errorf("assignment_time_to_live = %s, want 11s", got)
		}
		out[a.GetBucketId().GetBucket()["tenant"]] = qa.GetRateLimitStrategy()
	}
	return out
}

func blanket(s *typev3.RateLimitStrategy) string {
	if _, ok := s.GetStrategy().(*typev3.RateLimitStrategy_BlanketRule_); !ok {
		return ""
	}
	return s.GetBlanketRule().String()
}

// tokens is a token bucket as tokens_per_fill/fill_interval/max_tokens.
type tokens struct {
	perFill  uint32
	interval time.Duration
	max      uint32
}

func tokensOf(s *typev3.RateLimitStrategy) tokens {
	tb := s.GetTokenBucket()
	return tokens{tb.GetTokensPerFill().GetValue(), tb.GetFillInterval().AsDuration(), tb.GetMaxTokens()}
}

var (
	acme       = map[string]string{"tenant": "acme"}
	acmeOrders = map[string]string{"tenant": "acme", "route": "orders"}
)

// Each bucket gets what the policy says: a share of the matched rule's
// budget as a token bucket (one client: the whole budget), ALLOW_ALL for no
// match, unlimited and shadow rules, DENY_ALL for a blocked one.
func TestAssignmentsFollowThePolicy(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{}, nil)
	c := h.open(t)
	send(t, c, "quota", usage(acme, 1, 0), usage(acmeOrders, 1, 0),
		usage(map[string]string{"tenant": "nobody"}, 1, 0), usage(map[string]string{"tenant": "blocked"}, 0, 1),
		usage(map[string]string{"tenant": "free"}, 1, 0), usage(map[string]string{"tenant": "trial"}, 1, 0))
	resp, err := c.Recv()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*typev3.RateLimitStrategy{}
	for _, a := range resp.GetBucketAction() {
		got[canonical(a.GetBucketId().GetBucket())] = a.GetQuotaAssignmentAction().GetRateLimitStrategy()
	}
	if g := tokensOf(got[canonical(acme)]); g != (tokens{600, time.Minute, 10}) {
		t.Errorf("acme (10/s): %+v, want 600 per 1m, burst 10", g)
	}
	if g := tokensOf(got[canonical(acmeOrders)]); g != (tokens{60, time.Minute, 1}) {
		t.Errorf("acme/orders (60/min): %+v, want 60 per 1m, burst 1", g)
	}
	for tenant, want := range map[string]string{"nobody": "ALLOW_ALL", "blocked": "DENY_ALL", "free": "ALLOW_ALL", "trial": "ALLOW_ALL"} {
		if g := blanket(got[canonical(map[string]string{"tenant": tenant})]); g != want {
			t.Errorf("tenant %s: %q, want %s", tenant, g, want)
		}
	}
	for outcome, want := range map[string]float64{outcomeLimited: 2, outcomeNoMatch: 1, outcomeBlocked: 1, outcomeUnlimited: 1, outcomeShadow: 1} {
		if g := value(t, h.srv.metrics.buckets.WithLabelValues(outcome)); g != want {
			t.Errorf("buckets_total{outcome=%q} = %v, want %v", outcome, g, want)
		}
	}
	if g := value(t, h.srv.metrics.requests.WithLabelValues("quota.tenant_blocked", "denied")); g != 1 {
		t.Errorf("requests_total{rule=quota.tenant_blocked,result=denied} = %v, want 1", g)
	}
	assigned := h.srv.metrics.assignedVec.WithLabelValues("quota.tenant_acme")
	if g := value(t, assigned); g != 10 {
		t.Errorf("assigned_rate{rule=quota.tenant_acme} = %v, want 10", g)
	}
	// The stream's end gives its assigned rate back.
	if err := c.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Recv(); err != io.EOF {
		t.Fatalf("after CloseSend: %v, want EOF", err)
	}
	if g, s := value(t, assigned), value(t, h.srv.metrics.streams); g != 0 || s != 0 {
		t.Errorf("after the stream ended: assigned_rate %v, streams_open %v; want 0, 0", g, s)
	}
}

// A domain the policy does not have: every bucket ALLOW_ALL, counted; the
// stream stays open and keeps answering.
func TestUnknownDomainAllowsAll(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{}, nil)
	c := h.open(t)
	send(t, c, "nope", usage(acme, 1, 0))
	if g := blanket(recv(t, c)["acme"]); g != "ALLOW_ALL" {
		t.Fatalf("unknown domain: %q, want ALLOW_ALL", g)
	}
	send(t, c, "", usage(map[string]string{"tenant": "other"}, 1, 0))
	if g := blanket(recv(t, c)["other"]); g != "ALLOW_ALL" {
		t.Fatalf("second bucket: %q, want ALLOW_ALL", g)
	}
	if g := value(t, h.srv.metrics.buckets.WithLabelValues(outcomeUnknownDomain)); g != 2 {
		t.Errorf("buckets_total{outcome=unknown_domain} = %v, want 2", g)
	}
}

// A first message without a domain closes the stream with InvalidArgument;
// an empty bucket ID later on is ignored and counted, never an error.
func TestMalformedStream(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{}, nil)
	c := h.open(t)
	send(t, c, "", usage(acme, 1, 0))
	if _, err := c.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("no domain: %v, want InvalidArgument", err)
	}
	if g := value(t, h.srv.metrics.rejected.WithLabelValues(reasonNoDomain)); g != 1 {
		t.Errorf("streams_rejected_total{reason=no_domain} = %v, want 1", g)
	}
	c = h.open(t)
	send(t, c, "quota", &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{}, usage(acme, 1, 0))
	if got := recv(t, c); len(got) != 1 || got["acme"] == nil {
		t.Fatalf("after an empty bucket ID: %v, want acme's assignment", got)
	}
	if g := value(t, h.srv.metrics.buckets.WithLabelValues(outcomeEmptyID)); g != 1 {
		t.Errorf("buckets_total{outcome=empty_id} = %v, want 1", g)
	}
}

// Two Envoys share one budget: the first gets all of it, and when the
// second joins, the first is pushed its smaller share by its tick, without
// reporting again. Then each gets what it measured as demand: the small one
// all it wants, the large one the rest.
func TestTwoStreamsSplitABudget(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{Tick: 10 * time.Millisecond}, nil)
	a, b := h.open(t), h.open(t)
	send(t, a, "quota", usage(acme, 1, 0))
	if g := tokensOf(recv(t, a)["acme"]); g != (tokens{600, time.Minute, 10}) {
		t.Fatalf("a alone: %+v, want the whole 10/s", g)
	}
	send(t, b, "quota", usage(acme, 1, 0))
	recvUntil(t, b, tokens{300, time.Minute, 5}) // b joining: half
	recvUntil(t, a, tokens{300, time.Minute, 5}) // a, pushed by its tick without reporting
	h.clock.Add(quota.ReportInterval)
	send(t, b, "", usage(acme, 10, 0))           // 2/s over the interval
	recvUntil(t, b, tokens{120, time.Minute, 2}) // all it wants
	recvUntil(t, a, tokens{480, time.Minute, 8}) // a (not measured yet): the other 8/s
	// a reports 28/s: its share stays 8/s. The tick re-sends the
	// assignment every interval, before assignment_time_to_live runs out.
	send(t, a, "", usage(acme, 40, 100))
	sent := value(t, h.srv.metrics.assignments.WithLabelValues(labelTokenBucket))
	h.clock.Add(quota.ReportInterval)
	recvUntil(t, a, tokens{480, time.Minute, 8})
	if g := value(t, h.srv.metrics.assignments.WithLabelValues(labelTokenBucket)); g <= sent {
		t.Errorf("no refresh sent after an interval")
	}
	if g := value(t, h.srv.metrics.streams); g != 2 {
		t.Errorf("streams_open = %v, want 2", g)
	}
}

// failingStore fails every call.
type failingStore struct{}

var errDown = errors.New("store down")

func (failingStore) Report(context.Context, string, string, float64, time.Time) error { return errDown }
func (failingStore) Demands(context.Context, string, time.Time) (map[string]float64, error) {
	return nil, errDown
}
func (failingStore) GrowGrant(context.Context, quota.Grant, float64, time.Time) (float64, error) {
	return 0, errDown
}
func (failingStore) SetGrant(context.Context, quota.Grant, time.Time) error    { return errDown }
func (failingStore) OrphanGrant(context.Context, quota.Grant, time.Time) error { return errDown }

// The demand store down: fail closed denies, fail open allows (nothing to
// extend yet); both counted. Blanket buckets do not need the store.
func TestStoreFailure(t *testing.T) {
	t.Parallel()
	for _, closed := range []bool{false, true} {
		h := newHarness(t, Options{FailClosed: closed}, failingStore{})
		c := h.open(t)
		send(t, c, "quota", usage(acme, 1, 0), usage(map[string]string{"tenant": "blocked"}, 1, 0))
		got := recv(t, c)
		want := map[bool]string{false: "ALLOW_ALL", true: "DENY_ALL"}[closed]
		if g := blanket(got["acme"]); g != want {
			t.Errorf("closed=%v: acme %q, want %s", closed, g, want)
		}
		if g := blanket(got["blocked"]); g != "DENY_ALL" {
			t.Errorf("closed=%v: blocked %q, want DENY_ALL", closed, g)
		}
		if g := value(t, h.srv.metrics.storeErrors.WithLabelValues(failureMode(closed))); g != 1 {
			t.Errorf("closed=%v: store_errors_total = %v, want 1", closed, g)
		}
	}
}

// value reads one counter or gauge.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.Gauge.GetValue()
}

// recvUntil reads assignments until acme's is want (earlier pushes, such as
// a tick's refresh, are skipped); the stream's deadline bounds the wait.
func recvUntil(t *testing.T, c client, want tokens) {
	t.Helper()
	for {
		s := recv(t, c)["acme"]
		if s != nil && tokensOf(s) == want {
			return
		}
	}
}

// A policy reload re-matches a stream's buckets at their next assignment:
// acme's limit goes from 10/s to unlimited and the stream is sent
// ALLOW_ALL without reporting again.
func TestPolicyReloadRematches(t *testing.T) {
	t.Parallel()
	first := loadPolicy(t)
	var current atomic.Pointer[policy.Policy]
	current.Store(first)
	h := newHarness(t, Options{Tick: 10 * time.Millisecond, Policy: current.Load}, nil)
	c := h.open(t)
	send(t, c, "quota", usage(acme, 1, 0))
	recvUntil(t, c, tokens{600, time.Minute, 10})
	path := filepath.Join(t.TempDir(), "quota.yaml")
	if err := os.WriteFile(path, []byte("domain: quota\ndescriptors:\n  - key: tenant\n    rate_limit: {unlimited: true}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	next, err := policy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	current.Store(next)
	for {
		if s := recv(t, c)["acme"]; blanket(s) == "ALLOW_ALL" {
			break
		}
	}
	if g := value(t, h.srv.metrics.assignedVec.WithLabelValues("quota.tenant_acme")); g != 0 {
		t.Errorf("assigned_rate of the old rule = %v, want 0 after the reload", g)
	}
}

// Drain ends open streams with UNAVAILABLE and refuses new ones, so that a
// graceful stop does not wait for streams that live as long as their Envoy.
func TestDrain(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{}, nil)
	c := h.open(t)
	send(t, c, "quota", usage(acme, 1, 0))
	recv(t, c)
	h.srv.Drain()
	h.srv.Drain()
	if _, err := c.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("an open stream after Drain: %v, want UNAVAILABLE", err)
	}
	c = h.open(t)
	// The server may end the new stream before the report is sent: Send
	// then returns io.EOF, and the stream's status comes from Recv.
	if err := c.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "quota", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(acme, 1, 0)}}); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	if _, err := c.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("a new stream after Drain: %v, want UNAVAILABLE", err)
	}
	if g := value(t, h.srv.metrics.streams); g != 0 {
		t.Errorf("streams_open = %v after Drain, want 0", g)
	}
}

// flakyStore is a memory store that fails while down is set.
type flakyStore struct {
	*quota.MemoryStore
	down atomic.Bool
}

func (f *flakyStore) Report(ctx context.Context, key, id string, d float64, now time.Time) error {
	if f.down.Load() {
		return errDown
	}
	return f.MemoryStore.Report(ctx, key, id, d, now)
}

func (f *flakyStore) Demands(ctx context.Context, key string, now time.Time) (map[string]float64, error) {
	if f.down.Load() {
		return nil, errDown
	}
	return f.MemoryStore.Demands(ctx, key, now)
}

func (f *flakyStore) GrowGrant(ctx context.Context, g quota.Grant, budget float64, now time.Time) (float64, error) {
	if f.down.Load() {
		return 0, errDown
	}
	return f.MemoryStore.GrowGrant(ctx, g, budget, now)
}

func (f *flakyStore) SetGrant(ctx context.Context, g quota.Grant, now time.Time) error {
	if f.down.Load() {
		return errDown
	}
	return f.MemoryStore.SetGrant(ctx, g, now)
}

func (f *flakyStore) OrphanGrant(ctx context.Context, g quota.Grant, now time.Time) error {
	if f.down.Load() {
		return errDown
	}
	return f.MemoryStore.OrphanGrant(ctx, g, now)
}

// The store fails after a first assignment: fail open re-sends that
// assignment when it is due (its TTL extended), fail closed sends DENY_ALL
// at once; when the store is back, the share is sent again.
func TestStoreFailureAfterAnAssignment(t *testing.T) {
	t.Parallel()
	for _, closed := range []bool{false, true} {
		ms, err := quota.NewMemoryStore(quota.MemoryOptions{})
		if err != nil {
			t.Fatal(err)
		}
		store := &flakyStore{MemoryStore: ms}
		h := newHarness(t, Options{FailClosed: closed, Tick: 10 * time.Millisecond}, store)
		c := h.open(t)
		send(t, c, "quota", usage(acme, 1, 0))
		recvUntil(t, c, tokens{600, time.Minute, 10})
		store.down.Store(true)
		h.clock.Add(quota.ReportInterval) // the refresh is due
		s := recv(t, c)["acme"]
		if closed && blanket(s) != "DENY_ALL" {
			t.Fatalf("fail closed: %v, want DENY_ALL", s)
		}
		if !closed && tokensOf(s) != (tokens{600, time.Minute, 10}) {
			t.Fatalf("fail open: %v, want the last assignment re-sent", s)
		}
		store.down.Store(false)
		send(t, c, "", usage(acme, 5, 0))
		h.clock.Add(quota.ReportInterval) // fail open: the unchanged share is sent when due
		recvUntil(t, c, tokens{600, time.Minute, 10})
		if g := value(t, h.srv.metrics.storeErrors.WithLabelValues(failureMode(closed))); g < 1 {
			t.Errorf("closed=%v: store_errors_total = %v, want at least 1", closed, g)
		}
	}
}
