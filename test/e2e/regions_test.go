package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/internal/wanproxy"
)

// The regions test's limit (testdata/regions): 100 a second per tenant on
// sidecar.yaml's catch-all route, global, a floor of 5 each.
const (
	regionsLimit = 100
	regionsFloor = 5
)

// regionLoad is one region's offered load in one phase.
type regionLoad struct {
	region string
	load   *offered
}

// TestRegionsThroughEnvoy: one limit across two regions, through Envoy.
// Each region is a stack of its own (an Envoy running envoy/sidecar.yaml as
// shipped, whose ratelimit filter sends (tenant, route=default), two
// extauthz replicas, its own Redis), and reaches the global Redis through a
// proxy adding 100 ms each way that can black-hole; interval 500 ms, lease
// 1.5 s. acme's requests go through each region's Envoy:
//   - 3:1 (90 : 30 a second, above the limit), then shifted (30 : 90);
//   - b cut off from the global store (150 : 150), then rejoined;
//   - the global store stopped.
//
// Every 1 s window: the two regions together admit at most the limit
// (requests are counted by when they were sent; one answered in the next
// window may belong to either, so those are allowed for); at 3:1, from the
// fourth window (the key's first exchanges come before), the shares are
// max-min fair (70 : 30); after the shift b gets its 70 from the third
// window on; b cut off admits at most its floor from the third
// window on, a the rest; rejoined, 50 each by the fourth window; with the
// store down both keep their floors.
func TestRegionsThroughEnvoy(t *testing.T) {
	t.Parallel()
	global := redistest.Standalone(t)
	names := []string{"a", "b"}
	urls, wans := map[string]string{}, map[string]*wanproxy.Proxy{}
	for _, name := range names {
		wan := wanproxy.New(t, global.Addr, 100*time.Millisecond)
		s := newStack(t, stackOpts{
			config: "sidecar.yaml",
			policy: filepath.Join(deps.root, "test", "e2e", "testdata", "regions"),
			env: []string{
				"EXTAUTHZ_GLOBAL_REDIS_URL=redis://" + wan.Addr, "EXTAUTHZ_REGION=" + name, "EXTAUTHZ_REGIONS=a,b",
				"EXTAUTHZ_REGION_EXCHANGE_INTERVAL=500ms", "EXTAUTHZ_REGION_LEASE=1500ms",
			},
		})
		urls[name], wans[name] = s.url, wan
	}
	tenant := uniq("regions")
	var (
		mu    sync.Mutex
		loads []regionLoad
		wg    sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); wg.Wait() }()
	// phase starts a phase just after a window turns: the regions' loads at
	// rates a and b a second; it returns when the phase began.
	phase := func(a, b int) time.Time {
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 20*time.Millisecond)))
		mu.Lock()
		defer mu.Unlock()
		for _, l := range loads {
			l.load.stop()
		}
		for name, rps := range map[string]int{"a": a, "b": b} {
			l := &offered{name: name, url: urls[name], rps: rps, tenant: tenant}
			loads = append(loads, regionLoad{name, l})
			wg.Go(func() { l.run(ctx) })
		}
		return time.Now()
	}
	// admitted returns region's requests sent in window w: admitted, of
	// those answered after w, and asked.
	admitted := func(region string, w time.Time) (ok, straddled, asked int) {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range loads {
			if l.region == region {
				o, s := l.load.countSettled(w, w.Add(time.Second))
				_, denied := l.load.count(w, w.Add(time.Second))
				ok, straddled, asked = ok+o, straddled+s, asked+o+denied
			}
		}
		return ok, straddled, asked
	}

	steady := phase(90, 30)
	time.Sleep(6 * time.Second)
	shift := phase(30, 90)
	time.Sleep(6 * time.Second)
	cut := phase(150, 150)
	wans["b"].Cut.Store(true)
	time.Sleep(5 * time.Second)
	rejoined := phase(150, 150)
	wans["b"].Cut.Store(false)
	time.Sleep(4 * time.Second)
	down := phase(150, 150)
	global.Stop()
	time.Sleep(5 * time.Second)
	end := time.Now().Truncate(time.Second)

	var report strings.Builder
	for w := steady.Truncate(time.Second).Add(2 * time.Second); w.Before(end); w = w.Add(time.Second) {
		a, sa, askedA := admitted("a", w)
		b, sb, askedB := admitted("b", w)
		fmt.Fprintf(&report, " [%s a=%d/%d b=%d/%d]", w.Format("05"), a, askedA, b, askedB)
		// A share is what a region may admit: its demand, when a loaded
		// machine's client offered less.
		near := func(got, share, asked int) bool { return nearly(got, min(share, asked)) }
		if a+b > regionsLimit+sa+sb {
			t.Errorf("window at :%s: a %d + b %d admitted, above the limit %d (%d answered after the window)", w.Format("05"), a, b, regionsLimit, sa+sb)
		}
		in := func(p time.Time, from, to int) bool {
			return !w.Before(p.Truncate(time.Second).Add(time.Duration(from)*time.Second)) && w.Before(p.Truncate(time.Second).Add(time.Duration(to)*time.Second))
		}
		switch {
		case in(steady, 3, 6) && (!near(a, 70, askedA) || !near(b, 30, askedB)):
			t.Errorf("3:1, window at :%s: a %d, b %d; want 70 and 30 (max-min fair), ±10 %%", w.Format("05"), a, b)
		case in(shift, 3, 6) && (!near(a, 30, askedA) || !near(b, 70, askedB)):
			t.Errorf("after the shift, window at :%s: a %d, b %d; want 30 and 70, ±10 %%", w.Format("05"), a, b)
		case in(cut, 3, 5) && (b > regionsFloor+sb || !near(a, regionsLimit-regionsFloor, askedA)):
			t.Errorf("b cut off, window at :%s: a %d, b %d; want b at most its floor %d, a the rest", w.Format("05"), a, b, regionsFloor)
		case in(rejoined, 3, 4) && (!near(a, 50, askedA) || !near(b, 50, askedB)):
			t.Errorf("b rejoined, window at :%s: a %d, b %d; want 50 each", w.Format("05"), a, b)
		case in(down, 3, 5) && (a > regionsFloor+sa || b > regionsFloor+sb):
			t.Errorf("global store down, window at :%s: a %d, b %d; want at most their floors %d", w.Format("05"), a, b, regionsFloor)
		}
	}
	t.Logf("admitted per window:%s", report.String())
}

// nearly says whether got is within 10 % of want.
func nearly(got, want int) bool {
	return float64(got) >= 0.9*float64(want) && float64(got) <= 1.1*float64(want)
}
