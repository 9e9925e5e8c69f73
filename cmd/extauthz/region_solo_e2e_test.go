package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/extauthz/extauthz/internal/redistest"
)

// soloE2E is the back-off of TestRegionsSoloKeyEndToEnd: six intervals.
const soloE2E = 3 * time.Second

// TestRegionsSoloKeyEndToEnd: the binaries of TestRegionsEndToEnd (two
// regions of two replicas, 200 ms to the global store, 500 ms interval) with
// EXTAUTHZ_REGION_SOLO_INTERVAL=3s, and a limit of 1000 per 10 s used at
// 20 a second. Used in region a only, it is exchanged at most half as often
// as the interval once its exchanges see no other region, and a admits all
// it asks. When b asks too, b is granted more than its floor within the
// back-off, two intervals and four round trips (a holds its whole share
// until its next exchange sees b), and from then on admits all it asks.
func TestRegionsSoloKeyEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("a 20-second end-to-end run")
	}
	global := redistest.Standalone(t)
	regions := startRegions(t, global.Addr, "EXTAUTHZ_REGION_SOLO_INTERVAL="+soloE2E.String())
	a, b := regions[0], regions[1]
	ctx := context.Background()

	began := time.Now()
	asked, ok := 0, 0
	for time.Since(began) < 8*time.Second {
		asked++
		if askUser(ctx, t, a, asked, "m1").GetOverallCode() == rlsv3.RateLimitResponse_OK {
			ok++
		}
		time.Sleep(50 * time.Millisecond)
	}
	if ok != asked {
		t.Errorf("a alone admitted %d of %d asked, want all (20 a second, within 1000 per 10 s less b's floor)", ok, asked)
	}
	// Its first two exchanges make the key solo; from then on it backs off.
	steps := soloSteps(t, a, began.Add(2*time.Second), began.Add(8*time.Second))
	t.Logf("a alone: %d exchange steps of m1 in 6 s (12 intervals)", steps)
	if steps > 6 {
		t.Errorf("a alone exchanged m1 %d times in 12 intervals, want at most 6 (backing off up to %v)", steps, soloE2E)
	}

	joined := time.Now()
	floor := int32(1000 / 20)
	var followed time.Duration = -1
	deniedAfter := 0
	for n := 1; time.Since(joined) < 6*time.Second; n++ {
		askUser(ctx, t, a, n, "m1")
		res := askUser(ctx, t, b, n, "m1")
		if st := res.GetStatuses(); followed < 0 && len(st) == 1 && int32(st[0].GetLimitRemaining()) > floor {
			followed = time.Since(joined)
		}
		if followed >= 0 && res.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			deniedAfter++
		}
		time.Sleep(50 * time.Millisecond)
	}
	bound := soloE2E + 2*e2eInterval + 4*2*e2eWANDelay
	t.Logf("b asking too: granted more than its floor %v after it began (bound %v)", followed, bound)
	if followed < 0 || followed > bound {
		logStepsAround(t, regions, joined)
		t.Errorf("b granted more than its floor after %v, want within the back-off, two intervals and four round trips (%v)", followed, bound)
	}
	if deniedAfter > 0 {
		t.Errorf("b denied %d calls once granted more than its floor: a leaves it room for 20 a second", deniedAfter)
	}
}

// askUser asks one of r's replicas (the nth call) whether user may pass.
func askUser(ctx context.Context, t *testing.T, r *e2eRegion, n int, user string) *rlsv3.RateLimitResponse {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := r.rls[n%len(r.rls)].ShouldRateLimit(cctx, &rlsv3.RateLimitRequest{Domain: "shared",
		Descriptors: []*commonrlv3.RateLimitDescriptor{{Entries: []*commonrlv3.RateLimitDescriptor_Entry{{Key: "user", Value: user}}}}})
	if err != nil {
		t.Fatalf("region %s: %v", r.name, err)
	}
	return res
}

// soloSteps counts r's logged exchange steps of user m1 in [from, to).
func soloSteps(t *testing.T, r *e2eRegion, from, to time.Time) int {
	t.Helper()
	n := 0
	for _, p := range r.procs {
		for _, l := range strings.Split(p.Logs(), "\n") {
			var s struct {
				Time     time.Time
				Msg, Key string
			}
			if json.Unmarshal([]byte(l), &s) == nil && s.Msg == "region exchange" && strings.Contains(s.Key, "m1") &&
				!s.Time.Before(from) && s.Time.Before(to) {
				n++
			}
		}
	}
	return n
}
