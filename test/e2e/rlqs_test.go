package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// rlqsLimit is acme's global budget in testdata/rlqs (requests per second).
const rlqsLimit = 40

// TestRLQS runs envoy/rlqs.yaml on three Envoys against two extauthz
// replicas sharing one Redis, with one tenant's load skewed 70/20/10 % and
// three times the limit in all. Envoy 1.40 reports every 5 s (an interval),
// so the test is long: about 62 s of load in three phases.
//
// Phase 1 (0-30 s): from two intervals plus two seconds on, the admitted
// rate of the three together is the limit within ±10 %; the small Envoy,
// under its fair share, gets all it asks; denials are 429 with the
// configured problem+json; each Envoy holds one stream and reports once per
// interval, not per request. Phase 2 (30-45 s): the medium Envoy stops; 11 s
// later (its demand expires from Redis two intervals after its last report,
// then one tick) the others have absorbed its share. Phase 3 (45-60 s): the
// replica serving the most streams restarts; no 5-second window admits more
// than the limit +10 % (the moved streams are new clients whose old demand
// entries hold part of the budget until they expire: under-admission; each
// takes over the grant its old stream left to its address, so its old
// assignment never runs out unreplaced: no burst).
func TestRLQS(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOpts{config: "rlqs.yaml", policy: filepath.Join(deps.root, "test", "e2e", "testdata", "rlqs")})
	envoys := []*envoyProc{
		{proc: s.envoy, url: s.url, admin: s.admin},
		s.launchEnvoy("envoy-medium", s.grpcAddrs()),
		s.launchEnvoy("envoy-small", s.grpcAddrs()),
	}
	// 70 / 20 / 10 % of three times the limit.
	loads := []*offered{
		{name: "large", url: envoys[0].url, rps: 3 * rlqsLimit * 70 / 100},
		{name: "medium", url: envoys[1].url, rps: 3 * rlqsLimit * 20 / 100},
		{name: "small", url: envoys[2].url, rps: 3 * rlqsLimit * 10 / 100},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for _, l := range loads {
		wg.Go(func() { l.run(ctx) })
	}
	defer func() { cancel(); wg.Wait(); logTimeline(t, start, loads) }()
	at := start.Add

	sleepUntil(at(30 * time.Second))
	rlqsPhase1(t, loads, at(12*time.Second), at(30*time.Second))
	checkDenyResponse(t, loads[0])
	checkMessagesPerInterval(t, s, envoys, loads, time.Since(start))

	loads[1].stop()
	envoys[1].stop(5 * time.Second)
	stopped := time.Now()
	sleepUntil(at(45 * time.Second))
	total := admittedRate(loads, stopped.Add(11*time.Second), at(45*time.Second))
	t.Logf("phase 2: 11 s after the medium Envoy stopped, the two others admit %.1f/s together", total)
	if total < 0.9*rlqsLimit || total > 1.1*rlqsLimit {
		t.Errorf("after the medium Envoy stopped: the others admit %.1f/s, want its share absorbed (%d/s ±10 %%)", total, rlqsLimit)
	}

	restarted := restartBusiestReplica(t, s)
	sleepUntil(restarted.Add(15 * time.Second))
	for w := restarted; w.Before(restarted.Add(15 * time.Second)); w = w.Add(5 * time.Second) {
		rate := admittedRate(loads, w, w.Add(5*time.Second))
		t.Logf("phase 3: %.0f-%.0f s after the replica restart: %.1f/s", w.Sub(restarted).Seconds(), w.Sub(restarted).Seconds()+5, rate)
		if rate > 1.1*rlqsLimit {
			t.Errorf("after a replica restart: %.1f/s admitted in a 5 s window, above the limit of %d/s +10 %%", rate, rlqsLimit)
		}
	}
}

func sleepUntil(t time.Time) { time.Sleep(time.Until(t)) }

// rlqsPhase1 checks the steady state of all three Envoys in [from, to).
func rlqsPhase1(t *testing.T, loads []*offered, from, to time.Time) {
	t.Helper()
	for _, l := range loads {
		ok, denied := l.count(from, to)
		secs := to.Sub(from).Seconds()
		t.Logf("phase 1, %s Envoy: offered %.1f/s, admitted %.1f/s", l.name, float64(ok+denied)/secs, float64(ok)/secs)
	}
	total := admittedRate(loads, from, to)
	t.Logf("phase 1: admitted %.1f/s against a limit of %d/s (error %+.1f %%)", total, rlqsLimit, 100*(total-rlqsLimit)/rlqsLimit)
	if total < 0.9*rlqsLimit || total > 1.1*rlqsLimit {
		t.Errorf("phase 1: the three Envoys admitted %.1f/s together, want %d/s ±10 %%", total, rlqsLimit)
	}
	if ok, denied := loads[2].count(from, to); float64(denied) > 0.05*float64(ok+denied) {
		t.Errorf("the small Envoy (under its fair share) had %d of %d requests denied, want under 5 %%", denied, ok+denied)
	}
}

// admittedRate is the admitted requests per second of loads together,
// counted by send time in [from, to).
func admittedRate(loads []*offered, from, to time.Time) float64 {
	n := 0
	for _, l := range loads {
		ok, _ := l.count(from, to)
		n += ok
	}
	return float64(n) / to.Sub(from).Seconds()
}

// restartBusiestReplica restarts, on its address, the replica with the most
// RLQS streams open, and returns when it began to stop.
func restartBusiestReplica(t *testing.T, s *stack) time.Time {
	t.Helper()
	busiest, most := 0, -1.0
	for i, r := range s.replicas {
		if n := replicaMetric(t, r, "extauthz_rlqs_streams_open"); n > most {
			busiest, most = i, n
		}
	}
	t.Logf("phase 3: restarting replica %d (%.0f streams open)", busiest, most)
	old := s.replicas[busiest]
	at := time.Now()
	old.stop(5 * time.Second)
	s.retired = append(s.retired, old)
	s.startReplica(busiest, old.grpcAddr)
	return at
}

// logTimeline logs the admitted requests per second of each Envoy, for
// reading convergence off a test run.
func logTimeline(t *testing.T, start time.Time, loads []*offered) {
	t.Helper()
	for _, l := range loads {
		var b strings.Builder
		for sec := 0; start.Add(time.Duration(sec+1) * time.Second).Before(time.Now()); sec++ {
			ok, _ := l.count(start.Add(time.Duration(sec)*time.Second), start.Add(time.Duration(sec+1)*time.Second))
			fmt.Fprintf(&b, " %d", ok)
		}
		t.Logf("admitted per second, %s Envoy:%s", l.name, b.String())
	}
}

// checkDenyResponse: denied requests carry envoy/rlqs.yaml's deny response.
func checkDenyResponse(t *testing.T, l *offered) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.denied == nil {
		t.Fatalf("the %s Envoy saw no denial", l.name)
	}
	h := l.denied.Header
	if l.denied.StatusCode != http.StatusTooManyRequests || h.Get("Content-Type") != "application/problem+json" ||
		h.Get("Retry-After") != "1" || !strings.Contains(l.deniedBody, `"status":429`) {
		t.Errorf("a denied request: %d %v %s; want 429, problem+json, Retry-After: 1", l.denied.StatusCode, h, l.deniedBody)
	}
}

// checkMessagesPerInterval: each Envoy holds one stream (Envoy's own
// upstream_rq_total on the extauthz cluster) and the replicas received about
// one report per Envoy and interval, whatever the request rate.
func checkMessagesPerInterval(t *testing.T, s *stack, envoys []*envoyProc, loads []*offered, elapsed time.Duration) {
	t.Helper()
	requests := 0
	for i, e := range envoys {
		streams := envoyStatAt(t, e.admin, "cluster.extauthz.upstream_rq_total")
		sent := loads[i].sent()
		requests += sent
		t.Logf("%s Envoy: %d requests, %d gRPC streams to extauthz", loads[i].name, sent, streams)
		if streams < 1 || streams > 2 {
			t.Errorf("%s Envoy opened %d streams to extauthz, want one (two after a reconnect)", loads[i].name, streams)
		}
	}
	reports := 0.0
	for _, r := range s.replicas {
		reports += replicaMetric(t, r, "extauthz_rlqs_reports_total")
	}
	// One report at the bucket's first request, then one per 5 s.
	intervals := elapsed.Seconds() / 5
	t.Logf("reports received: %.0f for %d requests in %.0f intervals", reports, requests, intervals)
	if reports > float64(len(envoys))*(intervals+2) || reports < float64(len(envoys))*(intervals-1) {
		t.Errorf("%.0f usage reports from %d Envoys in %.1f intervals; want about one per Envoy and interval", reports, len(envoys), intervals)
	}
}

// offered is one Envoy's offered load: rps requests per second for one
// tenant (default acme), each sent on time whatever the previous ones do, each outcome
// recorded at its send time.
type offered struct {
	name   string
	url    string
	rps    int
	tenant string // default acme

	mu         sync.Mutex
	sends      []time.Time
	dones      []time.Time // when each answer came
	oks        []bool
	denied     *http.Response // the first denial
	deniedBody string
	stopped    chan struct{}
	stopOnce   sync.Once
}

var loadClient = &http.Client{
	Timeout:   5 * time.Second,
	Transport: &http.Transport{MaxIdleConnsPerHost: 256},
}

func (l *offered) run(ctx context.Context) {
	l.mu.Lock()
	if l.stopped == nil {
		l.stopped = make(chan struct{})
	}
	stopped := l.stopped
	l.mu.Unlock()
	tick := time.NewTicker(time.Second / time.Duration(l.rps))
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-stopped:
			return
		case sent := <-tick.C:
			wg.Go(func() { l.one(ctx, sent) })
		}
	}
}

func (l *offered) one(ctx context.Context, sent time.Time) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, l.url+"/rlqs", nil)
	if err != nil {
		return
	}
	tenant := l.tenant
	if tenant == "" {
		tenant = "acme"
	}
	req.Header.Set("x-tenant-id", tenant)
	resp, err := loadClient.Do(req)
	if err != nil {
		return // the test's end, or the stopped Envoy: not an outcome
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sends = append(l.sends, sent)
	l.dones = append(l.dones, time.Now())
	l.oks = append(l.oks, resp.StatusCode == http.StatusOK)
	if resp.StatusCode != http.StatusOK && l.denied == nil {
		l.denied, l.deniedBody = resp, string(body)
	}
}

func (l *offered) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped == nil {
		l.stopped = make(chan struct{})
	}
	l.stopOnce.Do(func() { close(l.stopped) })
}

// count returns the admitted and denied requests sent in [from, to).
func (l *offered) count(from, to time.Time) (ok, denied int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, at := range l.sends {
		if at.Before(from) || !at.Before(to) {
			continue
		}
		if l.oks[i] {
			ok++
		} else {
			denied++
		}
	}
	return ok, denied
}

// countSettled returns the admitted requests sent in [from, to), and how
// many of them were answered at or after to (a window's decision may have
// been the next one's).
func (l *offered) countSettled(from, to time.Time) (ok, late int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, at := range l.sends {
		if at.Before(from) || !at.Before(to) || !l.oks[i] {
			continue
		}
		ok++
		if !l.dones[i].Before(to) {
			late++
		}
	}
	return ok, late
}

func (l *offered) sent() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.sends)
}
