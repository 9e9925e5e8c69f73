package main

import (
	"context"
	"sync"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/genproto/googleapis/rpc/code"

	"github.com/extauthz/extauthz/internal/redistest"
)

// authzCall is one Check of the ext_authz e2e: when it was sent and
// answered, and whether it was allowed.
type authzCall struct {
	region     string
	sent, done time.Time
	ok         bool
}

// TestRegionsExtAuthzEndToEnd: the binaries of TestRegionsEndToEnd (two
// regions of two replicas, the global Redis 200 ms away), asked over
// ext_authz (Check) for the route /shared, whose limit of e2eLimit a second
// per tenant is global. Tenant acme asks at 3:1 (0.9 and 0.3 of the limit
// a second) for 9 s. In every whole window from the fifth on (before: the
// key's first decisions, its first exchanges, reports of "unknown"), the regions
// together admit at most the limit (a call counts in the window it was sent
// in; one sent and answered across a boundary may belong to either, so
// those are allowed for); on average at least 90 % of it is admitted,
// max-min fair: b its demand, a the rest (±10 %). Denials are 429.
func TestRegionsExtAuthzEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("a 12-second end-to-end run")
	}
	global := redistest.Standalone(t)
	regions := startRegions(t, global.Addr)
	rates := map[string]float64{"a": 0.9 * e2eLimit, "b": 0.3 * e2eLimit}
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Second)
	defer cancel()
	var (
		mu     sync.Mutex
		calls  []authzCall
		denied []int32
		wg     sync.WaitGroup
	)
	start := time.Now()
	for _, r := range regions {
		var clients []authv3.AuthorizationClient
		for _, p := range r.procs {
			clients = append(clients, authv3.NewAuthorizationClient(p.dial(t)))
		}
		wg.Go(func() {
			driveChecks(ctx, clients, rates[r.name], func(sent, done time.Time, res *authv3.CheckResponse) {
				mu.Lock()
				defer mu.Unlock()
				ok := res.GetStatus().GetCode() == int32(code.Code_OK)
				calls = append(calls, authzCall{region: r.name, sent: sent, done: done, ok: ok})
				if !ok {
					denied = append(denied, int32(res.GetDeniedResponse().GetStatus().GetCode()))
				}
			})
		})
	}
	wg.Wait()

	from, to := windowOf(start)+4, windowOf(time.Now())
	sum := map[string]int64{}
	for w := from; w < to; w++ {
		admitted, straddling := map[string]int64{}, int64(0)
		for _, c := range calls {
			switch {
			case windowOf(c.sent) != windowOf(c.done):
				if c.ok && (windowOf(c.sent) == w || windowOf(c.done) == w) {
					straddling++ // admitted in w, or in a window next to it
				}
			case windowOf(c.sent) == w && c.ok:
				admitted[c.region]++
			}
		}
		total := admitted["a"] + admitted["b"]
		sum["a"], sum["b"] = sum["a"]+admitted["a"], sum["b"]+admitted["b"]
		t.Logf("window %d: a %d, b %d, together %d of %d", w-from, admitted["a"], admitted["b"], total, e2eLimit)
		if total > e2eLimit+straddling {
			t.Errorf("window %d: %d admitted, above the global limit %d (%d calls straddled its edges)", w-from, total, e2eLimit, straddling)
		}
	}
	// As in TestRegionsEndToEnd, the 95 % is proven on a virtual clock; a
	// loaded machine's client moves the figures, so these catch a collapse
	// or a split that ignores demand.
	windows := float64(to - from)
	if u := float64(sum["a"]+sum["b"]) / windows / e2eLimit; windows < 3 || u < 0.9 {
		t.Errorf("%.0f windows measured, utilisation %.3f at demand above the limit: want 3 or more, and at least 0.9", windows, u)
	}
	for region, want := range map[string]float64{"a": 0.7 * e2eLimit, "b": 0.3 * e2eLimit} {
		if got := float64(sum[region]) / windows; got < 0.9*want || got > 1.1*want {
			t.Errorf("%s admitted %.0f a window, want its fair share %.0f ±10 %%", region, got, want)
		}
	}
	for _, status := range denied {
		if status != int32(typev3.StatusCode_TooManyRequests) {
			t.Fatalf("a denial with HTTP status %d, want 429", status)
		}
	}
	if len(denied) == 0 {
		t.Error("no call denied at demand above the limit")
	}
}

// driveChecks sends Checks of tenant acme for /shared at rate a second,
// alternating clients, until ctx ends; each answer goes to record.
func driveChecks(ctx context.Context, clients []authv3.AuthorizationClient, rate float64, record func(sent, done time.Time, res *authv3.CheckResponse)) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	carry, n := 0.0, 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for carry += rate * 0.005; carry >= 1; carry-- {
			n++
			client := clients[n%len(clients)]
			wg.Go(func() {
				req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
					Http: &authv3.AttributeContext_HttpRequest{Method: "GET", Path: "/shared", Host: "api.example.com",
						Headers: map[string]string{":method": "GET", ":path": "/shared", "x-tenant-id": "acme"}}}}}
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				sent := time.Now()
				res, err := client.Check(cctx, req)
				if err == nil {
					record(sent, time.Now(), res)
				}
			})
		}
	}
}
