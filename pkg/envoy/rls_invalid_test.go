package envoy

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
	"github.com/extauthz/extauthz/pkg/policy"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

func manyDescriptors(n int) []*commonrlv3.RateLimitDescriptor {
	out := make([]*commonrlv3.RateLimitDescriptor, n)
	for i := range out {
		out[i] = desc("route", "/x")
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
	d := desc("route", "/x")
	d.Limit = o
	return d
}

func withDescHits(h uint64) *commonrlv3.RateLimitDescriptor {
	d := desc("route", "/x")
	d.HitsAddend = wrapperspb.UInt64(h)
	return d
}

// invalidCases can all be sent over the wire.
var invalidCases = []struct {
	name string
	req  *rlsv3.RateLimitRequest
	msg  string // a part of the error message
}{
	{"empty domain", request("", desc("route", "/x")), "domain must not be empty"},
	{"huge domain", request(strings.Repeat("d", MaxEntryBytes+1), desc("route", "/x")), "domain is 1025 bytes"},
	{"no descriptors", request("api"), "descriptors must not be empty"},
	{"too many descriptors", &rlsv3.RateLimitRequest{Domain: "api", Descriptors: manyDescriptors(MaxDescriptors + 1)}, "65 descriptors, more than 64"},
	{"descriptor without entries", request("api", desc("route", "/x"), &commonrlv3.RateLimitDescriptor{}), "descriptors[1] has no entries"},
	{"too many entries", request("api", manyEntries(MaxEntries+1)), "descriptors[0] has 17 entries, more than 16"},
	{"empty key", request("api", desc("route", "/x", "", "v")), "descriptors[0].entries[1].key must not be empty"},
	{"huge key", request("api", desc(strings.Repeat("k", MaxEntryBytes+1), "v")), "descriptors[0].entries[0].key is 1025 bytes"},
	{"huge value", request("api", desc("route", strings.Repeat("v", 1<<20))), "descriptors[0].entries[0].value is 1048576 bytes"},
	{"descriptor hits over uint32", request("api", withDescHits(math.MaxUint32+1)), "descriptors[0].hits_addend is 4294967296"},
	{"descriptor hits max uint64", request("api", withDescHits(math.MaxUint64)), "hits_addend is 18446744073709551615"},
	{"negative hits", request("api", &commonrlv3.RateLimitDescriptor{Entries: desc("a", "b").Entries, IsNegativeHits: true}), "is_negative_hits"},
	{"override of 0 requests", request("api", withOverride(&commonrlv3.RateLimitDescriptor_RateLimitOverride{Unit: typev3.RateLimitUnit_SECOND})), "requests_per_unit must be at least 1"},
	{"override unknown unit", request("api", withOverride(&commonrlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1})), "unit UNKNOWN"},
	{"override out-of-range unit", request("api", withOverride(&commonrlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: 99})), "not a known time unit"},
	{"override period too long", request("api", withOverride(&commonrlv3.RateLimitDescriptor_RateLimitOverride{
		RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_YEAR, UnitMultiplier: wrapperspb.UInt32(math.MaxUint32)})), "unit_multiplier 4294967295"},
}

func TestRLSInvalidRequestsAreInvalidArgument(t *testing.T) {
	t.Parallel()
	e := startRLS(t, ordersPolicy)
	for _, c := range invalidCases {
		_, err := e.client.ShouldRateLimit(context.Background(), c.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), c.msg) {
			t.Errorf("%s: err = %v, want InvalidArgument containing %q", c.name, err, c.msg)
		}
	}
	if n := len(e.store.Calls()); n != 0 {
		t.Errorf("%d store calls for invalid requests, want 0", n)
	}
	if got := counterValue(t, e.reg, "extauthz_invalid_requests_total", map[string]string{"api": APIRateLimit}); got == 0 {
		t.Error("extauthz_invalid_requests_total not counted")
	}
}

func TestRLSAcceptsRequestsAtTheBounds(t *testing.T) {
	t.Parallel()
	e := startRLS(t, ordersPolicy)
	long := strings.Repeat("v", MaxEntryBytes)
	for name, req := range map[string]*rlsv3.RateLimitRequest{
		"64 descriptors":     {Domain: "api", Descriptors: manyDescriptors(MaxDescriptors)},
		"16 entries":         request("api", manyEntries(MaxEntries)),
		"1024-byte parts":    request(long, desc(long, long)),
		"max hits":           request("api", withDescHits(MaxHitsAddend)),
		"empty value":        request("api", desc("route", "")),
		"max request hits":   {Domain: "api", Descriptors: manyDescriptors(MaxDescriptors), HitsAddend: math.MaxUint32},
		"override 10 years":  request("api", withOverride(&commonrlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_YEAR, UnitMultiplier: wrapperspb.UInt32(10)})),
		"override of 2^32-1": request("api", withOverride(&commonrlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: math.MaxUint32, Unit: typev3.RateLimitUnit_SECOND})),
	} {
		if _, err := e.client.ShouldRateLimit(context.Background(), req); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestRLSNeverPanics calls the server directly with what the wire cannot
// carry (nil messages inside lists) and with absent policies.
func TestRLSNeverPanics(t *testing.T) {
	t.Parallel()
	e := startRLS(t, ordersPolicy)
	nilPolicy, err := NewRLS(e.store, PolicyFunc(func() *policy.Policy { return nil }), e.metrics)
	if err != nil {
		t.Fatal(err)
	}
	reqs := []*rlsv3.RateLimitRequest{
		nil,
		{},
		{Domain: "api", Descriptors: []*commonrlv3.RateLimitDescriptor{nil}},
		{Domain: "api", Descriptors: []*commonrlv3.RateLimitDescriptor{{Entries: []*commonrlv3.RateLimitDescriptor_Entry{nil}}}},
		{Domain: "api", Descriptors: []*commonrlv3.RateLimitDescriptor{{Entries: desc("route", "/orders").Entries, Limit: &commonrlv3.RateLimitDescriptor_RateLimitOverride{}}}},
		request("api", desc("tenant", "")),
		request("api", desc("tenant", "a")),
		request("api", desc("route", "/orders")),
	}
	for _, s := range []*RLS{e.rls, nilPolicy} {
		for i, req := range reqs {
			resp, err := s.ShouldRateLimit(context.Background(), req)
			if err != nil && status.Code(err) != codes.InvalidArgument {
				t.Errorf("request %d: %v, want OK or InvalidArgument", i, err)
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
	req := request("api", desc("route", "/orders"), desc("route", "/gcra"))

	e.store.mu.Lock()
	e.store.err = errors.New("connection refused")
	e.store.mu.Unlock()
	_, err := e.client.ShouldRateLimit(context.Background(), req)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("store error: %v, want Unavailable with the cause", err)
	}
	labels := map[string]string{"api": APIRateLimit, "domain": "api", "outcome": OutcomeError}
	if got := counterValue(t, e.reg, "extauthz_decisions_total", labels); got != 2 {
		t.Errorf("decisions_total{outcome=error} = %v, want 2 (one per descriptor)", got)
	}

	// A caller that has gone away gets its own cancellation back.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.rls.ShouldRateLimit(ctx, req); status.Code(err) != codes.Canceled {
		t.Errorf("cancelled caller: %v, want Canceled", err)
	}

	e.store.mu.Lock()
	e.store.err = nil
	e.store.reply = func([]ratelimit.Request) []ratelimit.Decision { return []ratelimit.Decision{{Allowed: true}} }
	e.store.mu.Unlock()
	if _, err := e.client.ShouldRateLimit(context.Background(), req); status.Code(err) != codes.Unavailable {
		t.Errorf("malformed store reply: %v, want Unavailable", err)
	}
}

func TestNewRLSRejectsNilDependencies(t *testing.T) {
	t.Parallel()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	store := newTestStore(t, time.Now)
	src := PolicyFunc(func() *policy.Policy { return nil })
	var nilFunc PolicyFunc
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
	if _, err := NewMetrics(nil); err == nil {
		t.Error("NewMetrics(nil): no error")
	}
	reg := prometheus.NewRegistry()
	if _, err := NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := NewMetrics(reg); err == nil {
		t.Error("NewMetrics twice on one registry: no error")
	}
}

// FuzzShouldRateLimit feeds arbitrary wire bytes to the server: every
// request either decodes to InvalidArgument or gets a complete answer.
func FuzzShouldRateLimit(f *testing.F) {
	for _, c := range invalidCases {
		b, _ := proto.Marshal(c.req)
		f.Add(b)
	}
	for _, r := range []*rlsv3.RateLimitRequest{
		request("api", desc("route", "/orders")),
		request("api", desc("tenant", "a", "route", "/orders"), withDescHits(3)),
		request("api", withOverride(&commonrlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_MINUTE})),
	} {
		b, _ := proto.Marshal(r)
		f.Add(b)
	}
	p := writePolicy(f, ordersPolicy)
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		f.Fatal(err)
	}
	clk := testclock.New(t0)
	s, err := NewRLS(newTestStore(f, clk.Now), PolicyFunc(func() *policy.Policy { return p }), m)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req := &rlsv3.RateLimitRequest{}
		if proto.Unmarshal(b, req) != nil {
			return
		}
		resp, err := s.ShouldRateLimit(context.Background(), req)
		if err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("%v: %v", req, err)
			}
			return
		}
		if resp.GetOverallCode() == rlsv3.RateLimitResponse_UNKNOWN || len(resp.GetStatuses()) != len(req.GetDescriptors()) {
			t.Fatalf("incomplete response %v to %v", resp, req)
		}
	})
}
