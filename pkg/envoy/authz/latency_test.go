package authz

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"

	"github.com/extauthz/extauthz/pkg/envoy"
)

// The estimate is the nearest-rank 90th percentile of the last 32 samples.
func TestRouteLatencyEstimate(t *testing.T) {
	l := NewRouteLatency(nil)
	if _, ok := l.Estimate("r"); ok {
		t.Fatal("estimate without samples")
	}
	for i := 1; i <= 10; i++ { // 1..10ms: rank ceil(0.9*10) = 9
		l.Observe("r", time.Duration(i)*time.Millisecond)
	}
	if d, ok := l.Estimate("r"); !ok || d != 9*time.Millisecond {
		t.Errorf("estimate %v %v, want 9ms", d, ok)
	}
	for range latencySamples { // the ring forgets the older samples
		l.Observe("r", time.Second)
	}
	if d, _ := l.Estimate("r"); d != time.Second {
		t.Errorf("estimate %v after 32 samples of 1s, want 1s", d)
	}
	l.Observe("r", -time.Second) // a clock stepped back: ignored
	if d, _ := l.Estimate("r"); d != time.Second {
		t.Errorf("estimate %v after a negative sample, want 1s", d)
	}
	if _, ok := l.Estimate("other"); ok {
		t.Error("routes share samples")
	}
}

// Memory is bounded: past latencyRoutes routes, one is forgotten per new one.
func TestRouteLatencyBoundsRoutes(t *testing.T) {
	l := NewRouteLatency(nil)
	for i := range latencyRoutes + 10 {
		l.Observe(fmt.Sprint("r", i), time.Millisecond)
	}
	if n := len(l.routes); n != latencyRoutes {
		t.Errorf("%d routes kept, want %d", n, latencyRoutes)
	}
}

func TestInProgressWait(t *testing.T) {
	const ttl = 30 * time.Second
	for _, c := range []struct {
		name      string
		est       time.Duration
		known     bool
		remaining time.Duration
		want      time.Duration
	}{
		{"no history: the default", 0, false, 30 * time.Second, DefaultInProgressWait},
		{"no history, lease almost over", 0, false, 500 * time.Millisecond, 500 * time.Millisecond},
		{"fast route: at least 1s", 50 * time.Millisecond, true, 30 * time.Second, time.Second},
		{"slow route, just started", 20 * time.Second, true, 30 * time.Second, 20 * time.Second},
		{"slow route, 5s in", 20 * time.Second, true, 25 * time.Second, 15 * time.Second},
		{"overdue: 1s", 20 * time.Second, true, 5 * time.Second, time.Second},
		{"slower than the lease: the remaining lease", time.Hour, true, 30 * time.Second, 30 * time.Second},
	} {
		if got := inProgressWait(c.est, c.known, ttl, c.remaining); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// runTakes runs one request of /orders through wiring (b), its upstream
// taking d on the manual clock: ext_proc records d as a sample of "orders".
func (e *idemEnv) runTakes(t *testing.T, key string, d time.Duration) {
	t.Helper()
	md := wantLease(t, e.post(t, "/orders/1", "acme", key, []byte("{}")), envoy.ActionLease)
	s := e.open(t)
	if r := s.send(reqHeaders(filterv3.ProcessingMode_NONE, false, md, ":method", "POST", ":path", "/orders/1")); r.GetRequestHeaders() == nil {
		t.Fatalf("request headers with a lease answered %v", r)
	}
	e.clock.Advance(d)
	s.upstream(201, []byte("done"), viaUpstream, 0)
}

// wantInProgress checks a 409's Retry-After and the basis its body names.
func wantInProgress(t *testing.T, status int, retryAfter []string, body []byte, want, basis string) {
	t.Helper()
	if status != 409 || len(retryAfter) != 1 || retryAfter[0] != want {
		t.Errorf("%d Retry-After %v, want 409 [%s]", status, retryAfter, want)
	}
	var p Problem
	if err := json.Unmarshal(body, &p); err != nil || p.RetryAfterBasis != basis {
		t.Errorf("problem %s (%v), want retry-after-basis %q", body, err, basis)
	}
}

// dupAuthz and dupExtProc send a duplicate of an in-flight request of key
// through each API and check its 409.
func (e *idemEnv) dupAuthz(t *testing.T, key, want, basis string) {
	t.Helper()
	resp := e.post(t, "/orders/1", "acme", key, []byte("{}"))
	d := resp.GetDeniedResponse()
	wantInProgress(t, int(d.GetStatus().GetCode()), deniedHeader(resp, "retry-after"), []byte(d.GetBody()), want, basis)
}

func (e *idemEnv) dupExtProc(t *testing.T, key, want, basis string) {
	t.Helper()
	_, ir := e.postA(t, "/orders/1", "acme", key, []byte("{}"))
	if ir == nil {
		t.Fatal("duplicate went upstream")
	}
	wantInProgress(t, int(ir.GetStatus().GetCode()), irHeader(ir, "retry-after"), ir.GetBody(), want, basis)
}

// A duplicate's Retry-After follows how long the route's requests take
// (lease held from ext_authz's hand-over to the stored reply), less the
// time the outstanding one has run, bounded by 1s and the remaining lease;
// both APIs answer from the samples ext_proc recorded.
func TestInProgressRetryAfterFollowsRouteLatency(t *testing.T) {
	t.Run("no history", func(t *testing.T) {
		e := startIdem(t, idemPolicy)
		e.post(t, "/orders/1", "acme", "k", []byte("{}"))
		e.dupAuthz(t, "k", "2", RetryAfterDefault)
		e.dupExtProc(t, "k", "2", RetryAfterDefault)
	})
	t.Run("50ms route", func(t *testing.T) {
		e := startIdem(t, idemPolicy)
		for i := range 5 {
			e.runTakes(t, fmt.Sprint("done", i), 50*time.Millisecond)
		}
		e.post(t, "/orders/1", "acme", "k", []byte("{}"))
		e.dupAuthz(t, "k", "1", RetryAfterRouteLatency)
		e.dupExtProc(t, "k", "1", RetryAfterRouteLatency)
	})
	t.Run("20s route", func(t *testing.T) {
		e := startIdem(t, idemPolicy)
		e.runTakes(t, "done", 20*time.Second)
		e.post(t, "/orders/1", "acme", "k", []byte("{}"))
		e.dupAuthz(t, "k", "20", RetryAfterRouteLatency)
		e.clock.Advance(5 * time.Second)
		e.dupExtProc(t, "k", "15", RetryAfterRouteLatency)
	})
	t.Run("slower than the lease", func(t *testing.T) {
		e := startIdem(t, idemPolicy)
		e.latency.Observe("orders", 50*time.Second)
		e.post(t, "/orders/1", "acme", "k", []byte("{}"))
		e.dupAuthz(t, "k", "30", RetryAfterRouteLatency) // bounded by the 30s lease
	})
}
