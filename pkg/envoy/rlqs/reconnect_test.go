package rlqs

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/extauthz/extauthz/pkg/ratelimit/quota"
)

// fleet is what every Envoy currently enforces for bucket acme, as the
// server sends it: an Envoy enforces the last assignment it was sent on any
// of its streams (a reconnected Envoy keeps the old stream's until the new
// one sends it another). It is updated when the server hands a message to
// gRPC, before it goes out, and remembers the largest total it has seen.
type fleet struct {
	mu       sync.Mutex
	rates    map[string]float64 // by the "envoy" metadata of the stream
	from     map[string]string  // the stream each rate came from
	maxTotal float64
}

func newFleet() *fleet { return &fleet{rates: map[string]float64{}, from: map[string]string{}} }

// rateOf is the rate a strategy admits (requests per second).
func rateOf(s *typev3.RateLimitStrategy) float64 {
	switch blanket(s) {
	case "ALLOW_ALL":
		return math.Inf(1)
	case "DENY_ALL":
		return 0
	}
	tb := s.GetTokenBucket()
	return float64(tb.GetTokensPerFill().GetValue()) / tb.GetFillInterval().AsDuration().Seconds()
}

func (f *fleet) sent(envoyName, stream string, resp *rlqspb.RateLimitQuotaResponse) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range resp.GetBucketAction() {
		if a.GetBucketId().GetBucket()["tenant"] != "acme" {
			continue
		}
		f.rates[envoyName] = rateOf(a.GetQuotaAssignmentAction().GetRateLimitStrategy())
		f.from[envoyName] = stream
	}
	total := 0.0
	for _, r := range f.rates {
		total += r
	}
	f.maxTotal = max(f.maxTotal, total)
}

// resetMax starts a new observation, from the current total.
func (f *fleet) resetMax() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.maxTotal = 0
	for _, r := range f.rates {
		f.maxTotal += r
	}
}

func (f *fleet) snapshot() (map[string]float64, map[string]string, float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rates, from := map[string]float64{}, map[string]string{}
	for k, v := range f.rates {
		rates[k], from[k] = v, f.from[k]
	}
	return rates, from, f.maxTotal
}

// interceptor records every message the server sends into f.
func (f *fleet) interceptor() grpc.ServerOption {
	return grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		md, _ := metadata.FromIncomingContext(ss.Context())
		name, stream := first(md.Get("envoy")), first(md.Get("stream"))
		return handler(srv, &recordingStream{ServerStream: ss, f: f, envoy: name, stream: stream})
	})
}

func first(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

type recordingStream struct {
	grpc.ServerStream
	f             *fleet
	envoy, stream string
}

func (r *recordingStream) SendMsg(m any) error {
	if resp, ok := m.(*rlqspb.RateLimitQuotaResponse); ok {
		r.f.sent(r.envoy, r.stream, resp)
	}
	return r.ServerStream.SendMsg(m)
}

// openAs opens a stream as Envoy name's stream-th; it drains its replies
// until the returned cancel ends it.
func (h *harness) openAs(t *testing.T, name string, stream int) (client, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	ctx = metadata.AppendToOutgoingContext(ctx, "envoy", name, "stream", fmt.Sprint(stream))
	c, err := rlqspb.NewRateLimitQuotaServiceClient(h.conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			if _, err := c.Recv(); err != nil {
				return
			}
		}
	}()
	return c, cancel
}

// waitFor polls the fleet until ok holds (real time: the streams tick every
// 100 ms), failing after 10 s.
func waitFor(t *testing.T, f *fleet, what string, ok func(rates map[string]float64, from map[string]string) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rates, from, _ := f.snapshot()
		if ok(rates, from) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: the fleet holds %v (from streams %v)", what, rates, from)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// overBudget is the total rate of what the fleet enforces beyond acme's
// budget of 10/s, up to float rounding.
func overBudget(total float64) bool { return total > 10*(1+1e-9) }

// An Envoy that reconnects gets a new client identity, with an unknown
// demand that claims the budget the others' spare shares still hold. What
// the fleet enforces must never exceed the limit, before, during and after
// the reconnect: the new stream is granted only what the others' live
// grants leave (its old assignment, still enforced by that Envoy, counts
// until it expires), and it gets more as they shrink.
func TestReconnectNeverOverGrants(t *testing.T) {
	t.Parallel()
	f := newFleet()
	h := newHarness(t, Options{Tick: 100 * time.Millisecond}, nil, f.interceptor())
	streams, cancels := map[string]client{}, map[string]context.CancelFunc{}
	for _, name := range []string{"A", "B", "C"} {
		streams[name], cancels[name] = h.openAs(t, name, 1)
		send(t, streams[name], "quota", usage(acme, 1, 0))
		waitFor(t, f, name+"'s first assignment", func(r map[string]float64, _ map[string]string) bool { return r[name] > 0 })
	}
	// One interval later each Envoy reports 1/s: the budget is split
	// evenly, each its 1/s plus a third of the spare.
	h.clock.Add(quota.ReportInterval)
	for _, name := range []string{"A", "B", "C"} {
		send(t, streams[name], "", usage(acme, 5, 0))
	}
	even := 200.0 / 60 // 200 tokens per minute each
	waitFor(t, f, "the even split", func(r map[string]float64, _ map[string]string) bool {
		return r["A"] == even && r["B"] == even && r["C"] == even
	})
	if _, _, total := f.snapshot(); overBudget(total) {
		t.Errorf("while Envoys joined, the fleet enforced %.3f/s, over the limit of 10/s", total)
	}

	// A's stream breaks; A reconnects (a new stream, as Envoy re-opens it at
	// its next report) and reports again. Until the new stream sends it an
	// assignment, A enforces the old one.
	f.resetMax()
	cancels["A"]()
	a2, _ := h.openAs(t, "A", 2)
	send(t, a2, "quota", usage(acme, 2, 0))
	waitFor(t, f, "A's first assignment on its new stream", func(_ map[string]float64, from map[string]string) bool {
		return from["A"] == "2"
	})
	// Let the others' ticks and A's settle.
	time.Sleep(500 * time.Millisecond)
	rates, _, total := f.snapshot()
	t.Logf("after the reconnect: %v, max total %.3f", rates, total)
	if overBudget(total) {
		t.Errorf("across A's reconnect the fleet enforced up to %.3f/s, over the limit of 10/s (now %v)", total, rates)
	}
}

// A reconnecting Envoy whose old share nobody else can give back (the other
// Envoy is under its fair share and does not shrink) is sent its new share
// at once: its new stream takes over the grant its old stream left to their
// peer, instead of waiting for that grant to expire while the Envoy's old
// assignment runs out (then Envoy applies expired_assignment_behavior,
// ALLOW_ALL in the shipped config). The clock stands still here, so no
// grant expires: only the takeover can make room.
func TestReconnectTakesOverItsOldGrant(t *testing.T) {
	t.Parallel()
	f := newFleet()
	h := newHarness(t, Options{Tick: 100 * time.Millisecond}, nil, f.interceptor())
	a, cancelA := h.openAs(t, "A", 1)
	b, _ := h.openAs(t, "B", 1)
	send(t, a, "quota", usage(acme, 1, 0))
	waitFor(t, f, "A's first assignment", func(r map[string]float64, _ map[string]string) bool { return r["A"] > 0 })
	send(t, b, "quota", usage(acme, 1, 0))
	waitFor(t, f, "the split", func(r map[string]float64, _ map[string]string) bool { return r["A"] == 5 && r["B"] == 5 })
	h.clock.Add(quota.ReportInterval)
	send(t, a, "", usage(acme, 50, 0)) // 10/s: more than its share
	send(t, b, "", usage(acme, 10, 0)) // 2/s: all it wants
	waitFor(t, f, "A 8/s, B 2/s", func(r map[string]float64, _ map[string]string) bool { return r["A"] == 8 && r["B"] == 2 })

	f.resetMax()
	cancelA()
	a2, _ := h.openAs(t, "A", 2)
	send(t, a2, "quota", usage(acme, 40, 0))
	waitFor(t, f, "A's first assignment on its new stream", func(_ map[string]float64, from map[string]string) bool {
		return from["A"] == "2"
	})
	if _, _, total := f.snapshot(); overBudget(total) {
		t.Errorf("across A's reconnect the fleet held up to %.3f/s, over the limit of 10/s", total)
	}
}
