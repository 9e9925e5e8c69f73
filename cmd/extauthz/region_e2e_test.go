package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/internal/wanproxy"
)

// regionPolicy: users g* share e2eLimit per second across regions (a floor
// of 5 % each), users m* 1000 per 10 s; users r* have a large regional
// limit, decided in the region's Redis as always: the latency baseline. The
// ext_authz route /shared: e2eLimit per second per tenant, global too.
var regionPolicy = fmt.Sprintf(`domain: shared
descriptors:
  - {key: user, value: "g*", rate_limit: {unit: second, requests_per_unit: %d, algorithm: fixed_window, scope: global, floor: 0.05}}
  - {key: user, value: "m*", rate_limit: {period: 10s, requests_per_unit: 1000, algorithm: fixed_window, scope: global, floor: 0.05}}
  - {key: user, value: "r*", rate_limit: {unit: second, requests_per_unit: 1000000, algorithm: fixed_window}}
http:
  identity: {sources: [{tenant_header: x-tenant-id}]}
  routes:
    - name: shared
      path_prefix: /shared
      rate_limits: [{name: shared, requests_per_unit: %d, unit: second, algorithm: fixed_window, scope: global, floor: 0.05}]
`, e2eLimit, e2eLimit)

const (
	e2eLimit = 300
	e2eFloor = e2eLimit / 20
	// e2eFollowed is where b's cap counts as having followed the shift to
	// its new share (70 % of the limit), less 6 %: the giver's demand is
	// measured over a few ticks after the shift.
	e2eFollowed = e2eLimit * 66 / 100
	e2eInterval = 500 * time.Millisecond
	e2eWANDelay = 100 * time.Millisecond // one way: 200 ms round trips
)

// e2eRegion is one region: its Redis, its link to the global Redis, two
// extauthz replicas, and the demand driven at it (calls per second).
type e2eRegion struct {
	name  string
	link  *wanproxy.Proxy
	procs []*proc
	rls   []rlsv3.RateLimitServiceClient
	mu    sync.Mutex
	rate  float64
}

func (r *e2eRegion) setRate(v float64) { r.mu.Lock(); r.rate = v; r.mu.Unlock() }
func (r *e2eRegion) getRate() float64  { r.mu.Lock(); defer r.mu.Unlock(); return r.rate }

// e2eCall is one decision as the client saw it.
type e2eCall struct {
	region   string
	at       time.Time
	latency  time.Duration
	ok       bool
	window   int64 // the window it was counted in (from duration_until_reset)
	global   bool
	capacity int64 // admitted so far in the window + remaining: the region's cap
}

// TestRegionsEndToEnd: two regions, each with its own redis-server and two
// extauthz processes, one global redis-server behind a WAN proxy per
// region (200 ms round trips, partitionable). 3:1 demand above the limit,
// a shift, a region cut off and rejoined, the global store stopped. Never
// more than the limit admitted in any window; the figures are logged for
// docs/multi-region.md.
func TestRegionsEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("a 40-second end-to-end run")
	}
	global := redistest.Standalone(t)
	regions := startRegions(t, global.Addr)
	a, b := regions[0], regions[1]
	d := startDriving(regions)
	d.run("warm-up", 2*time.Second, func() { a.setRate(0.9 * e2eLimit); b.setRate(0.3 * e2eLimit) })
	bytes0, t0 := a.link.Bytes.Load()+b.link.Bytes.Load(), time.Now()
	d.run("3:1", 8*time.Second, func() { a.setRate(0.9 * e2eLimit); b.setRate(0.3 * e2eLimit) })
	d.run("shift", 8*time.Second, func() { a.setRate(0.3 * e2eLimit); b.setRate(0.9 * e2eLimit) })
	wanBytes, wanDur := a.link.Bytes.Load()+b.link.Bytes.Load()-bytes0, time.Since(t0)
	d.run("b cut off", 6*time.Second, func() { a.setRate(1.5 * e2eLimit); b.setRate(1.5 * e2eLimit); b.link.Cut.Store(true) })
	d.run("b rejoined", 5*time.Second, func() { b.link.Cut.Store(false) })
	d.run("global down", 6*time.Second, func() { global.Stop() })
	log, phases := d.stop()

	report := analyse(t, log)
	for _, ph := range phases {
		t.Logf("phase %-12s admitted/asked %s", ph.name, report.windows(ph.from, ph.to))
	}
	logFigures(t, report, phases)
	t.Logf("WAN bytes per exchange interval per key per region (both directions): %.0f",
		float64(wanBytes)/(float64(wanDur)/float64(e2eInterval))/2)
	logStepsAround(t, regions, phases[2].from)
	for _, r := range regions {
		checkExchangeSteps(t, r)
	}
	checkBounds(t, report, phases)
}

// startRegions starts regions a and b: each a redis-server, a WAN proxy to
// the global Redis at globalAddr, and two extauthz processes.
func startRegions(t *testing.T, globalAddr string, extraEnv ...string) []*e2eRegion {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(regionPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	var regions []*e2eRegion
	for _, name := range []string{"a", "b"} {
		local := redistest.Standalone(t)
		r := &e2eRegion{name: name, link: wanproxy.New(t, globalAddr, e2eWANDelay)}
		env := append([]string{
			"EXTAUTHZ_CONFIG=" + path, "EXTAUTHZ_REDIS_URL=" + local.URL,
			"EXTAUTHZ_GLOBAL_REDIS_URL=redis://" + r.link.Addr, "EXTAUTHZ_REGION=" + name, "EXTAUTHZ_REGIONS=a,b",
			"EXTAUTHZ_REGION_EXCHANGE_INTERVAL=" + e2eInterval.String(), "EXTAUTHZ_REGION_LEASE=1500ms",
			"EXTAUTHZ_LOG_LEVEL=debug", // the exchange steps, logged around the shift
		}, slices.Concat(patient, extraEnv)...)
		for range 2 {
			p := start(t, env...)
			r.procs = append(r.procs, p)
			r.rls = append(r.rls, rlsv3.NewRateLimitServiceClient(p.dial(t)))
		}
		regions = append(regions, r)
	}
	return regions
}

// e2ePhase is one stretch of the run.
type e2ePhase struct {
	name     string
	from, to time.Time
}

// driving drives every region's demand and collects the calls.
type driving struct {
	regions   []*e2eRegion
	cancel    func()
	wg        sync.WaitGroup
	calls     chan e2eCall
	log       []e2eCall
	collected chan struct{}
	phases    []e2ePhase
}

func startDriving(regions []*e2eRegion) *driving {
	ctx, cancel := context.WithCancel(context.Background())
	d := &driving{regions: regions, cancel: cancel, calls: make(chan e2eCall, 1<<16), collected: make(chan struct{})}
	for _, r := range regions {
		d.wg.Add(1)
		go func() { defer d.wg.Done(); drive(ctx, r, d.calls) }()
	}
	go func() {
		for c := range d.calls {
			d.log = append(d.log, c)
		}
		close(d.collected)
	}()
	return d
}

// run starts a phase just after a window starts, sets it up and lets it
// run for dur.
func (d *driving) run(name string, dur time.Duration, setup func()) {
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 20*time.Millisecond)))
	setup()
	from := time.Now()
	time.Sleep(dur)
	d.phases = append(d.phases, e2ePhase{name, from, time.Now()})
}

// stop ends the demand and returns every call and the phases.
func (d *driving) stop() ([]e2eCall, []e2ePhase) {
	for _, r := range d.regions {
		r.setRate(0)
	}
	d.cancel()
	d.wg.Wait()
	close(d.calls)
	<-d.collected
	return d.log, d.phases
}

// logFigures logs what docs/multi-region.md reports.
func logFigures(t *testing.T, report *e2eReport, phases []e2ePhase) {
	t.Helper()
	steady, shift := phases[1], phases[2]
	t.Logf("utilisation in the 3:1 phase (whole windows after the first): %.3f", report.utilisation(steady.from.Add(time.Second), steady.to))
	t.Logf("utilisation after the shift (its 2nd to last windows): %.3f", report.utilisation(shift.from.Add(time.Second), shift.to))
	t.Logf("shift followed: b's cap reached %d (its new share %d less 6 %%) %v after the shift",
		e2eFollowed, e2eLimit*7/10, report.follow("b", shift.from, e2eFollowed))
	t.Logf("decision latency, global limit: %s; regional limit: %s", report.latency(true), report.latency(false))
	t.Logf("windows checked against the limit: %d", len(report.admitted))
}

// checkExchangeSteps sums r's replicas' exchange steps by result: both
// replicas follow the key, one exchanges it at a time, and the global store
// stopped (and b's cut) fail steps.
func checkExchangeSteps(t *testing.T, r *e2eRegion) {
	t.Helper()
	steps := map[string]float64{}
	for i, p := range r.procs {
		t.Logf("region %s replica %d: %d exchange failures logged", r.name, i, strings.Count(p.Logs(), "global limit exchange failed"))
		_, body := p.get(t, "/metrics")
		for _, line := range strings.Split(body, "\n") {
			for _, res := range []string{"ok", "not_owner", "failed"} {
				if rest, found := strings.CutPrefix(line, `extauthz_region_exchanges_total{result="`+res+`"} `); found {
					v, _ := strconv.ParseFloat(rest, 64)
					steps[res] += v
				}
			}
		}
	}
	t.Logf("region %s exchange steps: %v", r.name, steps)
	if steps["ok"] == 0 || steps["not_owner"] == 0 || steps["failed"] == 0 {
		t.Errorf("region %s: exchange steps %v, want ok, not_owner and failed all counted", r.name, steps)
	}
}

// checkBounds fails for a window above the limit, a cut-off region (or
// both, the global store down) above its floor once its grants lapsed, or
// a collapse of utilisation.
func checkBounds(t *testing.T, report *e2eReport, phases []e2ePhase) {
	t.Helper()
	if over := report.overLimit(); len(over) > 0 {
		t.Errorf("windows above the limit %d: %v", e2eLimit, over)
	}
	cut := phases[3]
	if got := report.regionMax("b", cut.from.Add(2*time.Second), cut.to); got > e2eFloor {
		t.Errorf("b cut off admitted %d in a window once its grants lapsed, above its floor %d", got, e2eFloor)
	}
	down := phases[5]
	for _, r := range []string{"a", "b"} {
		if got := report.regionMax(r, down.from.Add(2*time.Second), down.to); got > e2eFloor {
			t.Errorf("global store down: %s admitted %d in a window once its grants lapsed, above its floor %d", r, got, e2eFloor)
		}
	}
	// The 95 % bound is proven on a virtual clock (TestSimSkewAndShift);
	// here the client's own hiccups on a shared machine move the figure
	// (96-99 % measured), so this only catches a collapse.
	if u := report.utilisation(phases[1].from.Add(time.Second), phases[1].to); u < 0.9 {
		t.Errorf("utilisation %.3f at steady demand above the limit, want >= 0.9", u)
	}
}

// drive calls r's replicas at r's rate (alternating), every tenth call on
// a regional user for the latency baseline.
func drive(ctx context.Context, r *e2eRegion, out chan<- e2eCall) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	carry, n := 0.0, 0
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for carry += r.getRate() * 0.005; carry >= 1; carry-- {
			n++
			client := r.rls[n%len(r.rls)]
			wg.Add(1)
			go func(n int) {
				defer wg.Done()
				call(ctx, r.name, client, "g1", out)
				if n%10 == 0 {
					call(ctx, r.name, client, "r1", out)
				}
			}(n)
		}
	}
}

func call(ctx context.Context, region string, client rlsv3.RateLimitServiceClient, user string, out chan<- e2eCall) {
	req := &rlsv3.RateLimitRequest{Domain: "shared", Descriptors: []*commonrlv3.RateLimitDescriptor{{
		Entries: []*commonrlv3.RateLimitDescriptor_Entry{{Key: "user", Value: user}},
	}}}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	resp, err := client.ShouldRateLimit(cctx, req)
	end := time.Now()
	if err != nil {
		return // the test is ending
	}
	c := e2eCall{region: region, at: end, latency: end.Sub(start), ok: resp.GetOverallCode() == rlsv3.RateLimitResponse_OK, global: user == "g1"}
	if sts := resp.GetStatuses(); len(sts) == 1 {
		reset := sts[0].GetDurationUntilReset().AsDuration()
		// The window ends at now + reset by the region's Redis, on this
		// machine's clock: round to the nearest second boundary.
		c.window = int64(math.Round(float64(end.Add(reset).UnixMilli())/1000)) - 1
		c.capacity = int64(sts[0].GetLimitRemaining())
	}
	out <- c
}

type e2eReport struct {
	admitted map[int64]map[string]int64 // window → region → admitted
	asked    map[int64]map[string]int64 // window → region → calls, admitted or not
	calls    []e2eCall
}

func analyse(t *testing.T, log []e2eCall) *e2eReport {
	t.Helper()
	r := &e2eReport{admitted: map[int64]map[string]int64{}, asked: map[int64]map[string]int64{}, calls: log}
	sort.Slice(r.calls, func(i, j int) bool { return r.calls[i].at.Before(r.calls[j].at) })
	for i, c := range r.calls {
		if !c.global {
			continue
		}
		if r.admitted[c.window] == nil {
			r.admitted[c.window], r.asked[c.window] = map[string]int64{}, map[string]int64{}
		}
		r.asked[c.window][c.region]++
		if c.ok {
			r.admitted[c.window][c.region]++
		}
		// The region's cap: admitted so far in the window plus what it says
		// is left (approximate under concurrency).
		r.calls[i].capacity += r.admitted[c.window][c.region]
	}
	return r
}

func windowOf(t time.Time) int64 { return t.Unix() }

func (r *e2eReport) windows(from, to time.Time) string {
	s := ""
	for w := windowOf(from); w < windowOf(to); w++ {
		s += fmt.Sprintf("[a=%d/%d b=%d/%d] ", r.admitted[w]["a"], r.asked[w]["a"], r.admitted[w]["b"], r.asked[w]["b"])
	}
	return s
}

func (r *e2eReport) overLimit() []string {
	var out []string
	for w, m := range r.admitted {
		if m["a"]+m["b"] > e2eLimit {
			out = append(out, fmt.Sprintf("%d: a=%d b=%d", w, m["a"], m["b"]))
		}
	}
	return out
}

// utilisation is what was admitted over the whole windows in [from, to),
// against what could have been: the limit, or what was asked when that was
// less (the test's client, on a busy machine, does not always offer its
// rate).
func (r *e2eReport) utilisation(from, to time.Time) float64 {
	var n, possible int64
	for w := windowOf(from); w < windowOf(to); w++ {
		n += r.admitted[w]["a"] + r.admitted[w]["b"]
		possible += min(e2eLimit, r.asked[w]["a"]+r.asked[w]["b"])
	}
	return float64(n) / float64(possible)
}

func (r *e2eReport) regionMax(region string, from, to time.Time) int64 {
	var m int64
	for w := windowOf(from) + 1; w < windowOf(to); w++ {
		m = max(m, r.admitted[w][region])
	}
	return m
}

// follow is the time from at to the first call of region whose cap reached
// share.
func (r *e2eReport) follow(region string, at time.Time, share int64) time.Duration {
	for _, c := range r.calls {
		if c.global && c.region == region && c.at.After(at) && c.ok && c.capacity >= share {
			return c.at.Sub(at)
		}
	}
	return -1
}

func (r *e2eReport) latency(global bool) string {
	var ls []time.Duration
	for _, c := range r.calls {
		if c.global == global {
			ls = append(ls, c.latency)
		}
	}
	if len(ls) == 0 {
		return "no calls"
	}
	slices.Sort(ls)
	return fmt.Sprintf("p50 %v p99 %v (%d calls)", ls[len(ls)/2], ls[len(ls)*99/100], len(ls))
}

// logStepsAround logs every region's exchange steps from half a second
// before at to two seconds after, in time order: what each region reported
// and was granted while a shift was followed.
func logStepsAround(t *testing.T, regions []*e2eRegion, at time.Time) {
	t.Helper()
	type step struct {
		at   time.Time
		line string
	}
	var steps []step
	for _, r := range regions {
		for _, p := range r.procs {
			for _, l := range strings.Split(p.Logs(), "\n") {
				var s struct {
					Time                         time.Time
					Msg                          string
					Demand                       float64
					Target, Window, Budget, Next int64
					Early, Retry                 bool
				}
				if json.Unmarshal([]byte(l), &s) != nil || s.Msg != "region exchange" ||
					s.Time.Before(at.Add(-500*time.Millisecond)) || s.Time.After(at.Add(2*time.Second)) {
					continue
				}
				steps = append(steps, step{s.Time, fmt.Sprintf("%s demand %.1f target %d grants w%d %d/%d early=%v retry=%v",
					r.name, s.Demand, s.Target, s.Window%100, s.Budget, s.Next, s.Early, s.Retry)})
			}
		}
	}
	slices.SortFunc(steps, func(a, b step) int { return a.at.Compare(b.at) })
	for _, s := range steps {
		t.Logf("shift %+5dms: %s", s.at.Sub(at).Milliseconds(), s.line)
	}
}
