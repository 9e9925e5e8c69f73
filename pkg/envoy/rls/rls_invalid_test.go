package rls

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/extauthz/extauthz/internal/testclock"
	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
	"github.com/extauthz/extauthz/pkg/policy"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

func manyDescriptors(n int) []*commonrlv3.RateLimitDescriptor {
	out := make([]*commonrlv3.RateLimitDescriptor, n)
	for i := range out {
		out[i] = envoytest.Desc("route", "/x")
	}
	return out
}

// manyMatching is n descriptors that each count against "orders".
func manyMatching(n int) []*commonrlv3.RateLimitDescriptor {
	out := make([]*commonrlv3.RateLimitDescriptor, n)
	for i := range out {
		out[i] = envoytest.Desc("route", "/orders")
	}
	return out
}

func manyEntries(n int) *commonrlv3.RateLimitDescriptor {
	d := &commonrlv3.RateLimitDescriptor{}
	for range n {
		d.Entries = append(d.Entries, &commonrlv3.RateLimitDescriptor_Entry{Key: "k", Value: "v"})
	}
	return d
}

func withOverride(o *commonrlv3.RateLimitDescriptor_RateLimitOverride) *commonrlv3.RateLimitDescriptor {
	d := envoytest.Desc("route", "/x")
	d.Limit = o
	return d
}

func withDescHits(h uint64) *commonrlv3.RateLimitDescriptor {
	d := envoytest.Desc("route", "/orders")
	d.HitsAddend = wrapperspb.UInt64(h)
	return d
}

// boundCase is a request shape the server decides by a fallback rule.
type boundCase struct {
	name    string
	req     *rlsv3.RateLimitRequest
	overall rlsv3.RateLimitResponse_Code
	codes   []rlsv3.RateLimitResponse_Code // per descriptor; nil: not checked
	reason  string                         // extauthz_invalid_requests_total reason charged ("" none)
	charged int                            // descriptors sent to the store
}

func repeatCode(c rlsv3.RateLimitResponse_Code, n int) []rlsv3.RateLimitResponse_Code {
	out := make([]rlsv3.RateLimitResponse_Code, n)
	for i := range out {
		out[i] = c
	}
	return out
}

// boundCases can all be sent over the wire; none is an error.
var boundCases = []boundCase{
	{"empty domain", envoytest.Request("", envoytest.Desc("route", "/orders")), codeOK, []rlsv3.RateLimitResponse_Code{codeOK}, "", 0},
	{"huge domain", envoytest.Request(strings.Repeat("d", 4096), envoytest.Desc("route", "/orders")), codeOK, []rlsv3.RateLimitResponse_Code{codeOK}, "", 0},
	{"no descriptors", envoytest.Request("api"), codeOK, nil, reasonNoDescriptors, 0},
	{"65 descriptors: 64 decided, the 65th denied", &rlsv3.RateLimitRequest{Domain: "api", Descriptors: manyDescriptors(MaxDescriptors + 1)},
		codeOver, append(repeatCode(codeOK, MaxDescriptors), codeOver), reasonDescriptors, 0},
	{"1000 descriptors: 64 decided and charged, 936 denied", &rlsv3.RateLimitRequest{Domain: "api", Descriptors: manyMatching(1000)},
		codeOver, append(repeatCode(codeOK, 10), codeOver), reasonDescriptors, MaxDescriptors},
	{"descriptor without entries is unmatched, the other decided", envoytest.Request("api", envoytest.Desc("route", "/orders"), &commonrlv3.RateLimitDescriptor{}),
		codeOK, []rlsv3.RateLimitResponse_Code{codeOK, codeOK}, reasonNoEntries, 1},
	{"17 entries denied, the other decided", envoytest.Request("api", envoytest.Desc("route", "/orders"), manyEntries(MaxEntries+1)),
		codeOver, []rlsv3.RateLimitResponse_Code{codeOK, codeOver}, reasonEntries, 1},
	{"empty key is matched (no rule has one)", envoytest.Request("api", envoytest.Desc("route", "/orders", "", "v")), codeOK, []rlsv3.RateLimitResponse_Code{codeOK}, reasonEmptyKey, 0},
	{"huge key is matched", envoytest.Request("api", envoytest.Desc(strings.Repeat("k", 4096), "v")), codeOK, []rlsv3.RateLimitResponse_Code{codeOK}, "", 0},
	{"1 MiB value is decided", envoytest.Request("api", envoytest.Desc("route", strings.Repeat("v", MaxRequestBytes-5))), codeOK, []rlsv3.RateLimitResponse_Code{codeOK}, "", 0},
	{"bytes past the bound are denied", envoytest.Request("api", envoytest.Desc("route", "/orders"), envoytest.Desc("route", strings.Repeat("v", MaxRequestBytes))),
		codeOver, []rlsv3.RateLimitResponse_Code{codeOK, codeOver}, reasonBytes, 1},
	{"descriptor hits over uint32 is clamped and denied", envoytest.Request("api", withDescHits(math.MaxUint32+1)), codeOver, []rlsv3.RateLimitResponse_Code{codeOver}, reasonHits, 1},
	{"descriptor hits max uint64 is clamped and denied", envoytest.Request("api", withDescHits(math.MaxUint64)), codeOver, []rlsv3.RateLimitResponse_Code{codeOver}, reasonHits, 1},
	{"negative hits: a refund of one hit (hits_addend 0 is 1)", envoytest.Request("api", &commonrlv3.RateLimitDescriptor{Entries: envoytest.Desc("route", "/orders").Entries, IsNegativeHits: true}),
		codeOK, []rlsv3.RateLimitResponse_Code{codeOK}, "", 1},
	{"override of 0 requests blocks", envoytest.Request("api", withOverride(&commonrlv3.RateLimitDescriptor_RateLimitOverride{Unit: typev3.RateLimitUnit_SECOND})),
		codeOver, []rlsv3.RateLimitResponse_Code{codeOver}, "", 0},
	{"override unknown unit is ignored", envoytest.Request("api", withOverride(&commonrlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1})),
		codeOK, []rlsv3.RateLimitResponse_Code{codeOK}, reasonOverride, 0},
	{"override out-of-range unit is ignored", envoytest.Request("api", withOverride(&commonrlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: 99})),
		codeOK, []rlsv3.RateLimitResponse_Code{codeOK}, reasonOverride, 0},
	{"override period too long is clamped", envoytest.Request("api", withOverride(&commonrlv3.RateLimitDescriptor_RateLimitOverride{
		RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_YEAR, UnitMultiplier: wrapperspb.UInt32(math.MaxUint32)})),
		codeOK, []rlsv3.RateLimitResponse_Code{codeOK}, reasonOverride, 1},
}

func TestRLSDecidesEveryRequestShape(t *testing.T) {
	t.Parallel()
	for _, c := range boundCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := startRLS(t, ordersPolicy)
			resp, err := e.client.ShouldRateLimit(context.Background(), c.req)
			if err != nil {
				t.Fatalf("err = %v, want a decision", err)
			}
			if resp.GetOverallCode() != c.overall || len(resp.GetStatuses()) != len(c.req.GetDescriptors()) {
				t.Fatalf("overall = %v with %d statuses, want %v with %d", resp.GetOverallCode(), len(resp.GetStatuses()), c.overall, len(c.req.GetDescriptors()))
			}
			for i, want := range c.codes {
				if got := resp.GetStatuses()[i].GetCode(); got != want {
					t.Errorf("statuses[%d] = %v, want %v", i, got, want)
				}
			}
			charged := 0
			for _, call := range e.store.Calls() {
				charged += len(call)
			}
			if charged != c.charged {
				t.Errorf("%d descriptors sent to the store, want %d", charged, c.charged)
			}
			got := envoytest.CounterValue(t, e.reg, "extauthz_invalid_requests_total", map[string]string{"api": envoy.APIRateLimit})
			want := 0.0
			if c.reason != "" {
				want = envoytest.CounterValue(t, e.reg, "extauthz_invalid_requests_total", map[string]string{"api": envoy.APIRateLimit, "reason": c.reason})
				if want == 0 {
					t.Errorf("reason %q not counted", c.reason)
				}
			}
			if got != want {
				t.Errorf("invalid_requests_total = %v, want only reason %q (%v)", got, c.reason, want)
			}
		})
	}
}

func TestRLSAcceptsRequestsAtTheBounds(t *testing.T) {
	t.Parallel()
	e := startRLS(t, ordersPolicy)
	long := strings.Repeat("v", 1024)
	for name, req := range map[string]*rlsv3.RateLimitRequest{
		"64 descriptors":     {Domain: "api", Descriptors: manyDescriptors(MaxDescriptors)},
		"16 entries":         envoytest.Request("api", manyEntries(MaxEntries)),
		"1024-byte parts":    envoytest.Request(long, envoytest.Desc(long, long)),
		"max hits":           envoytest.Request("api", withDescHits(MaxHitsAddend)),
		"empty value":        envoytest.Request("api", envoytest.Desc("route", "")),
		"max request hits":   {Domain: "api", Descriptors: manyDescriptors(MaxDescriptors), HitsAddend: math.MaxUint32},
		"override 10 years":  envoytest.Request("api", withOverride(&commonrlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_YEAR, UnitMultiplier: wrapperspb.UInt32(10)})),
		"override of 2^32-1": envoytest.Request("api", withOverride(&commonrlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: math.MaxUint32, Unit: typev3.RateLimitUnit_SECOND})),
	} {
		if _, err := e.client.ShouldRateLimit(context.Background(), req); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if got := envoytest.CounterValue(t, e.reg, "extauthz_invalid_requests_total", map[string]string{"api": envoy.APIRateLimit}); got != 0 {
		t.Errorf("invalid_requests_total = %v for requests within the bounds", got)
	}
}

// TestRLSNeverPanics calls the server directly with what the wire cannot
// carry (nil messages inside lists) and with absent policies.
func TestRLSNeverPanics(t *testing.T) {
	t.Parallel()
	e := startRLS(t, ordersPolicy)
	nilPolicy, err := NewRLS(e.store, envoy.PolicyFunc(func() *policy.Policy { return nil }), e.metrics)
	if err != nil {
		t.Fatal(err)
	}
	reqs := []*rlsv3.RateLimitRequest{
		nil,
		{},
		{Domain: "api", Descriptors: []*commonrlv3.RateLimitDescriptor{nil}},
		{Domain: "api", Descriptors: []*commonrlv3.RateLimitDescriptor{{Entries: []*commonrlv3.RateLimitDescriptor_Entry{nil}}}},
		{Domain: "api", Descriptors: []*commonrlv3.RateLimitDescriptor{{Entries: envoytest.Desc("route", "/orders").Entries, Limit: &commonrlv3.RateLimitDescriptor_RateLimitOverride{}}}},
		envoytest.Request("api", envoytest.Desc("tenant", "")),
		envoytest.Request("api", envoytest.Desc("tenant", "a")),
		envoytest.Request("api", envoytest.Desc("route", "/orders")),
	}
	for _, s := range []*RLS{e.rls, nilPolicy} {
		for i, req := range reqs {
			resp, err := s.ShouldRateLimit(context.Background(), req)
			if err != nil {
				t.Errorf("request %d: %v, want a decision", i, err)
			}
			if err == nil && (resp.GetOverallCode() == rlsv3.RateLimitResponse_UNKNOWN || len(resp.GetStatuses()) != len(req.GetDescriptors())) {
				t.Errorf("request %d: bad response %v", i, resp)
			}
		}
	}
}

func TestRLSStoreFailureIsUnavailable(t *testing.T) {
	t.Parallel()
	e := startRLS(t, ordersPolicy)
	req := envoytest.Request("api", envoytest.Desc("route", "/orders"), envoytest.Desc("route", "/gcra"))

	e.store.SetErr(errors.New("connection refused"))
	_, err := e.client.ShouldRateLimit(context.Background(), req)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("store error: %v, want Unavailable with the cause", err)
	}
	labels := map[string]string{"api": envoy.APIRateLimit, "domain": "api", "outcome": envoy.OutcomeError}
	if got := envoytest.CounterValue(t, e.reg, "extauthz_decisions_total", labels); got != 2 {
		t.Errorf("decisions_total{outcome=error} = %v, want 2 (one per descriptor)", got)
	}

	// A caller that has gone away gets its own cancellation back.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.rls.ShouldRateLimit(ctx, req); status.Code(err) != codes.Canceled {
		t.Errorf("cancelled caller: %v, want Canceled", err)
	}

	e.store.SetErr(nil)
	e.store.SetReply(func([]ratelimit.Request) []ratelimit.Decision { return []ratelimit.Decision{{Allowed: true}} })
	if _, err := e.client.ShouldRateLimit(context.Background(), req); status.Code(err) != codes.Unavailable {
		t.Errorf("malformed store reply: %v, want Unavailable", err)
	}
}

// Every class of store failure through RLS: the caller's own end as such,
// anything else Unavailable.
func TestRLSStoreErrorClasses(t *testing.T) {
	t.Parallel()
	e := startRLS(t, ordersPolicy)
	req := envoytest.Request("api", envoytest.Desc("route", "/orders"))
	for _, c := range envoytest.StoreErrorCases {
		s, err := NewRLS(envoytest.FailingStore{Err: c.Err}, envoy.PolicyFunc(func() *policy.Policy { return e.policy }), e.metrics)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := c.Ctx()
		_, err = s.ShouldRateLimit(ctx, req)
		cancel()
		if status.Code(err) != c.Want {
			t.Errorf("%s: %v, want %v", c.Name, err, c.Want)
		}
	}
}

func TestNewRLSRejectsNilDependencies(t *testing.T) {
	t.Parallel()
	m, err := envoy.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	store := envoytest.NewTestStore(t, time.Now)
	src := envoy.PolicyFunc(func() *policy.Policy { return nil })
	var nilFunc envoy.PolicyFunc
	var nilWatcher *policy.Watcher
	for name, f := range map[string]func() (*RLS, error){
		"nil store":           func() (*RLS, error) { return NewRLS(nil, src, m) },
		"nil policy source":   func() (*RLS, error) { return NewRLS(store, nil, m) },
		"nil PolicyFunc":      func() (*RLS, error) { return NewRLS(store, nilFunc, m) },
		"nil *policy.Watcher": func() (*RLS, error) { return NewRLS(store, nilWatcher, m) },
		"nil metrics":         func() (*RLS, error) { return NewRLS(store, src, nil) },
	} {
		if s, err := f(); err == nil || s != nil {
			t.Errorf("%s: NewRLS = %v, %v; want an error", name, s, err)
		}
	}
	if _, err := envoy.NewMetrics(nil); err == nil {
		t.Error("NewMetrics(nil): no error")
	}
	reg := prometheus.NewRegistry()
	if _, err := envoy.NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := envoy.NewMetrics(reg); err == nil {
		t.Error("NewMetrics twice on one registry: no error")
	}
}

// FuzzShouldRateLimit feeds arbitrary wire bytes through the server's codec
// to the server: every request that decodes gets a complete answer, never an
// error.
func FuzzShouldRateLimit(f *testing.F) {
	for _, c := range boundCases {
		b, _ := proto.Marshal(c.req)
		f.Add(b)
	}
	for _, r := range []*rlsv3.RateLimitRequest{
		envoytest.Request("api", envoytest.Desc("route", "/orders")),
		envoytest.Request("api", envoytest.Desc("tenant", "a", "route", "/orders"), withDescHits(3)),
		envoytest.Request("api", withOverride(&commonrlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_MINUTE})),
	} {
		b, _ := proto.Marshal(r)
		f.Add(b)
	}
	p := envoytest.WritePolicy(f, ordersPolicy)
	m, err := envoy.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		f.Fatal(err)
	}
	clk := testclock.New(envoytest.T0)
	s, err := NewRLS(envoytest.NewTestStore(f, clk.Now), envoy.PolicyFunc(func() *policy.Policy { return p }), m)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req := &rlsv3.RateLimitRequest{}
		if envoy.UnmarshalLenient(b, req) != nil {
			if proto.Unmarshal(b, req) == nil {
				t.Fatalf("the codec rejects %x, which proto accepts", b)
			}
			return
		}
		resp, err := s.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatalf("%v: %v", req, err)
		}
		if resp.GetOverallCode() == rlsv3.RateLimitResponse_UNKNOWN || len(resp.GetStatuses()) != len(req.GetDescriptors()) {
			t.Fatalf("incomplete response %v to %v", resp, req)
		}
	})
}
