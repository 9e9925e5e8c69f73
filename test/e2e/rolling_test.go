package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/extauthz/extauthz/test/e2e/upstream"
)

// The rolling restart tests run the shipped drain: EXTAUTHZ_DRAIN_DELAY at
// its default and Envoy's health checks as envoy/front-proxy.yaml ships
// them: what a restart costs is a matter of those timings. The call
// deadlines are the loaded machine's (deadlines_test.go), not the shipped
// 100-200 ms: a replica going away shows as a reset or a refused
// connection, never as a timeout, and on a starved machine a shipped
// deadline fails calls that no restart touched (an ext_authz call that
// times out is a 503 on a fail-closed route). finish still counts RLS calls
// that timed out apart.
const (
	// loadRate is the paced request rate through Envoy.
	loadRate = 400
	// replicaStopGrace bounds one replica's exit after SIGTERM: the drain
	// delay (10s) and the shutdown timeout (10s), with room.
	replicaStopGrace = 30 * time.Second
)

// TestRollingRestartSameAddress restarts both replicas one at a time on
// their own addresses under load (paced at 400 requests/s over the three
// filter combinations), each as soon as the previous one is ready again (as
// a Deployment rollout waits for readiness, not for Envoy): every request
// is answered by the upstream or with a 429, and no call to extauthz was
// lost with a replica (the ratelimit filter would hide that by failing
// open; see finish).
func TestRollingRestartSameAddress(t *testing.T) {
	// Not parallel: the load needs the machine to itself.
	s := newStack(t, stackOpts{env: rollingEnv(t)})
	l := startLoad(t, s)
	for i := range s.replicas {
		old := s.replicas[i]
		old.stop(replicaStopGrace)
		s.startReplica(i, old.grpcAddr)
	}
	l.finish(t, s)
}

// TestRollingRestartNewAddress is the Kubernetes way: Envoy reads the
// extauthz endpoints from EDS; per replica, a new one starts on a new
// address and joins the endpoints once ready, then the old endpoint is
// removed and the old replica gets SIGTERM at the same moment (no preStop
// sleep: the hardest order). Same requirements as above, and at the end
// Envoy's cluster holds exactly the new replicas.
func TestRollingRestartNewAddress(t *testing.T) {
	// Not parallel: the load needs the machine to itself.
	s := newStack(t, stackOpts{eds: true, env: rollingEnv(t)})
	l := startLoad(t, s)
	for i := range s.replicas {
		old := s.replicas[i]
		fresh := s.startReplica(len(s.replicas), "") // the surge replica, ready
		s.setEndpoints(s.grpcAddrs()...)
		s.replicas[i], s.replicas = fresh, s.replicas[:len(s.replicas)-1]
		s.retired = append(s.retired, old)
		s.setEndpoints(s.grpcAddrs()...)
		old.stop(replicaStopGrace)
	}
	l.finish(t, s)
	want := s.grpcAddrs()
	if err := waitFor(nil, 15*time.Second, func() error {
		got := s.envoyHosts(t, "extauthz")
		if !slices.Equal(got, want) {
			return fmt.Errorf("envoy's extauthz hosts %v, want %v", got, want)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

// rollingEnv sets the drain delay and shutdown timeout back to their
// shipped defaults (the stack shortens them for the tests that never stop
// a replica gracefully) and logs at info: debug logs of every call would
// cost the load its CPU.
func rollingEnv(t *testing.T) []string {
	t.Helper()
	return []string{"EXTAUTHZ_DRAIN_DELAY=10s", "EXTAUTHZ_SHUTDOWN_TIMEOUT=10s", "EXTAUTHZ_LOG_LEVEL=info"}
}

func (s *stack) grpcAddrs() []string {
	var out []string
	for _, r := range s.replicas {
		out = append(out, r.grpcAddr)
	}
	slices.Sort(out)
	return out
}

// clusterLines is Envoy's admin /clusters, a line each.
func (s *stack) clusterLines(t *testing.T) []string {
	t.Helper()
	resp, err := probeClient.Get(s.admin + "/clusters")
	if err != nil {
		t.Fatalf("envoy clusters: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(string(body), "\n")
}

// envoyHosts lists the hosts of an Envoy cluster (admin /clusters), sorted.
func (s *stack) envoyHosts(t *testing.T, cluster string) []string {
	t.Helper()
	seen := map[string]bool{}
	for _, line := range s.clusterLines(t) {
		parts := strings.Split(line, "::")
		if len(parts) >= 3 && parts[0] == cluster && strings.Contains(parts[1], ":") {
			seen[parts[1]] = true
		}
	}
	var out []string
	for h := range seen {
		out = append(out, h)
	}
	slices.Sort(out)
	return out
}

// load sends requests through Envoy at loadRate until finish, over the
// three filter combinations of front-proxy.yaml: the catch-all route
// (ratelimit + ext_authz), /orders (ratelimit + ext_authz + ext_proc) and
// /payments (ratelimit + ext_proc), each with a fresh tenant and key.
type load struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	started time.Time
	before  envoyCounters

	total, upstream, limited, skipped atomic.Int64
	mu                                sync.Mutex
	bad                               []string
}

// envoyCounters are Envoy stats of the calls to extauthz: how many
// failed, and why.
type envoyCounters map[string]int

var counterNames = []string{
	"cluster.upstream.ratelimit.failure_mode_allowed",
	"http.ingress.ext_authz.extauthz.error",
	"cluster.extauthz.upstream_rq_timeout",
	"cluster.extauthz.upstream_rq_rx_reset",
	"cluster.extauthz.upstream_rq_tx_reset",
	"cluster.extauthz.upstream_cx_destroy_remote_with_active_rq",
	"cluster.extauthz.upstream_cx_connect_fail",
	"cluster.extauthz.upstream_rq_pending_failure_eject",
	"cluster.extauthz.upstream_rq_retry",
	"cluster.extauthz.upstream_rq_retry_success",
	"cluster.extauthz.upstream_rq_retry_limit_exceeded",
	"cluster.extauthz.outlier_detection.ejections_enforced_total",
	"cluster.extauthz.health_check.failure",
}

func (s *stack) counters(t *testing.T) envoyCounters {
	c := envoyCounters{}
	for _, n := range counterNames {
		c[n] = s.envoyStat(t, n)
	}
	return c
}

func (c envoyCounters) minus(d envoyCounters) envoyCounters {
	out := envoyCounters{}
	for k, v := range c {
		out[k] = v - d[k]
	}
	return out
}

func startLoad(t *testing.T, s *stack) *load {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	l := &load{cancel: cancel, started: time.Now(), before: s.counters(t)}
	work := make(chan int, 64)
	l.wg.Go(func() { l.pace(ctx, work) })
	for range 32 {
		l.wg.Go(func() {
			for n := range work {
				l.one(s, n)
			}
		})
	}
	return l
}

// pace hands out request numbers at loadRate; when every worker is busy a
// tick is skipped (and counted), never queued.
func (l *load) pace(ctx context.Context, work chan<- int) {
	defer close(work)
	tick := time.NewTicker(time.Second / loadRate)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		select {
		case work <- n:
		default:
			l.skipped.Add(1)
		}
	}
}

func (l *load) one(s *stack, n int) {
	tenant := uniq("roll")
	r := req{path: "/things", header: map[string]string{"x-tenant-id": tenant}}
	switch n % 3 {
	case 1:
		r = post(wiringB, tenant, uniq("k"), `{}`)
	case 2:
		r = post(wiringA, tenant, uniq("k"), `{}`)
	}
	rep, err := s.try(r)
	l.total.Add(1)
	switch {
	case err == nil && rep.status == http.StatusTooManyRequests:
		l.limited.Add(1)
		return
	case err == nil && rep.status == http.StatusOK && rep.header.Get(upstream.HeaderExecution) != "":
		l.upstream.Add(1)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.bad) < 20 {
		l.bad = append(l.bad, fmt.Sprintf("%s %s at %v: %v %v", r.method, r.path, time.Since(l.started).Round(time.Millisecond), rep, err))
	} else {
		l.bad = append(l.bad[:20], "...")
	}
}

// finish lets the load run 2 more seconds, stops it and checks every
// answer and Envoy's counters of failed extauthz calls.
func (l *load) finish(t *testing.T, s *stack) {
	t.Helper()
	time.Sleep(2 * time.Second)
	l.cancel()
	l.wg.Wait()
	elapsed := time.Since(l.started)
	d := s.counters(t).minus(l.before)
	total := l.total.Load()
	t.Logf("%d requests in %v (%.0f/s; %d ticks skipped with every worker busy): %d from the upstream, %d 429",
		total, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(), l.skipped.Load(), l.upstream.Load(), l.limited.Load())
	for _, n := range counterNames {
		t.Logf("  %s: %d", n, d[n])
	}
	if n := total - l.upstream.Load() - l.limited.Load(); n > 0 {
		t.Errorf("%d of %d requests answered other than by the upstream or 429:\n%s", n, total, strings.Join(l.bad, "\n"))
	}
	// The ratelimit filter hides a failed call (it fails open). A restart
	// must lose none: no call reset, cut with its connection or refused
	// beyond its retries. A starved machine can still time out a call
	// (100ms): those are counted by Envoy and reported, not blamed on the
	// restart, and every fail-open must be one of them.
	for _, n := range []string{
		"cluster.extauthz.upstream_rq_rx_reset",
		"cluster.extauthz.upstream_cx_destroy_remote_with_active_rq",
		"cluster.extauthz.upstream_rq_retry_limit_exceeded",
	} {
		if d[n] > 0 {
			t.Errorf("%s = %d, want 0: calls reset or cut by a replica", n, d[n])
		}
	}
	if fo, to := d["cluster.upstream.ratelimit.failure_mode_allowed"], d["cluster.extauthz.upstream_rq_timeout"]; fo > to {
		t.Errorf("%d RLS calls failed open, only %d of them timed out: the others were lost with a replica", fo, to)
	} else if fo > 0 {
		t.Logf("%d RLS calls timed out (100ms) and failed open: the machine was starved (see ticks skipped)", fo)
	}
	if total == 0 {
		t.Error("no request was sent")
	}
}

// TestEjectedReplicaReadmitted: outlier detection never keeps a healthy
// replica out. A killed replica is ejected (connection failures); restarted
// on its address, the next passing health check (every 2s) readmits it,
// long before base_ejection_time (5s) would. Measured: about 2s.
func TestEjectedReplicaReadmitted(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOpts{})
	r0 := s.replicas[0]
	r0.kill()
	if err := waitFor(nil, 15*time.Second, func() error {
		_, _ = s.try(tenantGet("/things", uniq("eject")))
		if f := s.hostFlags(t, r0.grpcAddr); !strings.Contains(f, "failed_outlier_check") {
			return fmt.Errorf("health flags %q", f)
		}
		return nil
	}); err != nil {
		t.Fatalf("the killed replica was not ejected: %v", err)
	}
	ejected := time.Now()
	s.startReplica(0, r0.grpcAddr)
	if err := waitFor(nil, 15*time.Second, func() error {
		if f := s.hostFlags(t, r0.grpcAddr); f != "healthy" {
			return fmt.Errorf("health flags %q", f)
		}
		return nil
	}); err != nil {
		t.Fatalf("the restarted replica was not readmitted: %v", err)
	}
	readmitted := time.Since(ejected)
	t.Logf("readmitted %v after its ejection", readmitted.Round(time.Millisecond))
	if readmitted >= 5*time.Second {
		t.Errorf("readmitted %v after its ejection: the ejection timer (base_ejection_time 5s), not the health check, let it back", readmitted)
	}
}

// hostFlags is Envoy's health_flags of one extauthz host ("healthy", or
// a list such as "/failed_active_hc/failed_outlier_check").
func (s *stack) hostFlags(t *testing.T, addr string) string {
	t.Helper()
	prefix := "extauthz::" + addr + "::health_flags::"
	for _, line := range s.clusterLines(t) {
		if strings.HasPrefix(line, prefix) {
			return strings.TrimPrefix(line, prefix)
		}
	}
	return "(no such host)"
}
