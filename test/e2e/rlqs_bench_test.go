package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestRLQSBenchmark measures throughput and latency through one Envoy with
// no limit (router only), with RLS (the ratelimit filter alone, one call to
// extauthz per request) and with RLQS (the rate_limit_quota filter: a local
// token bucket), and extauthz's CPU per admitted request in each mode. A
// measurement, not an assertion: it runs only with E2E_RLQS_BENCH=1
// (E2E_RLQS_BENCH_SECONDS per round, default 5; three rounds, modes
// interleaved) and prints a table (docs/rlqs.md has the command and
// figures).
func TestRLQSBenchmark(t *testing.T) {
	if os.Getenv("E2E_RLQS_BENCH") == "" {
		t.Skip("set E2E_RLQS_BENCH=1 to measure RLS and RLQS through Envoy")
	}
	round := 5 * time.Second
	if v, err := strconv.Atoi(os.Getenv("E2E_RLQS_BENCH_SECONDS")); err == nil && v > 0 {
		round = time.Duration(v) * time.Second
	}
	// The shipped deadlines: throughput is measured as users run it.
	modes := []*benchMode{
		{name: "no limit (router only)", s: newStack(t, stackOpts{config: "rlqs.yaml", stripFilters: true, noExtauthz: true, shippedDeadlines: true})},
		// Without x-tenant-id the front proxy's catch-all route sends one
		// descriptor, (no_api_key, remote_address), limited to 100000/s.
		{name: "RLS (ratelimit filter)", s: newStack(t, stackOpts{stripFilters: true, keepFilters: []string{"envoy.filters.http.ratelimit"}, shippedDeadlines: true})},
		{name: "RLQS (rate_limit_quota filter)", tenant: "bench", s: newStack(t, stackOpts{config: "rlqs.yaml",
			policy: filepath.Join(deps.root, "test", "e2e", "testdata", "rlqs"), shippedDeadlines: true})},
	}
	for _, m := range modes {
		m.run(t, time.Second) // warm-up: connections, the RLQS assignment
		m.reset()
	}
	for r := 0; r < 3; r++ {
		for _, m := range modes {
			m.run(t, round)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| mode | requests/s | p50 | p99 | admitted | extauthz CPU per admitted request |\n|---|---|---|---|---|---|\n")
	for _, m := range modes {
		sort.Slice(m.lat, func(i, j int) bool { return m.lat[i] < m.lat[j] })
		cpu := "-"
		if m.ok > 0 && len(m.s.replicas) > 0 {
			cpu = fmt.Sprintf("%.1f µs", m.cpu.Seconds()*1e6/float64(m.ok))
		}
		fmt.Fprintf(&b, "| %s | %.0f | %s | %s | %d of %d | %s |\n", m.name, float64(m.ok+m.other)/m.elapsed.Seconds(),
			pct(m.lat, 50), pct(m.lat, 99), m.ok, m.ok+m.other, cpu)
	}
	t.Logf("%d concurrent clients, 3 rounds of %s per mode:\n%s", benchClients, round, b.String())
}

// benchClients is the closed-loop concurrency of the benchmark.
const benchClients = 16

type benchMode struct {
	name   string
	tenant string // x-tenant-id, when set
	s      *stack

	ok, other int
	lat       []time.Duration
	elapsed   time.Duration
	cpu       time.Duration // extauthz replicas, user + system
}

func (m *benchMode) reset() { m.ok, m.other, m.lat, m.elapsed, m.cpu = 0, 0, nil, 0, 0 }

// run sends requests from benchClients loops for d and adds the outcomes.
func (m *benchMode) run(t *testing.T, d time.Duration) {
	t.Helper()
	cpu0 := m.replicaCPU(t)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for c := 0; c < benchClients; c++ {
		wg.Go(func() {
			for ctx.Err() == nil {
				t0 := time.Now()
				code := benchGet(ctx, m.s.url, m.tenant)
				lat := time.Since(t0)
				mu.Lock()
				switch {
				case code == http.StatusOK:
					m.ok++
					m.lat = append(m.lat, lat)
				case code != 0:
					m.other++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	m.elapsed += time.Since(start)
	m.cpu += m.replicaCPU(t) - cpu0
}

func benchGet(ctx context.Context, url, tenant string) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/bench", nil)
	if err != nil {
		return 0
	}
	if tenant != "" {
		req.Header.Set("x-tenant-id", tenant)
	}
	resp, err := loadClient.Do(req)
	if err != nil {
		return 0 // the round's end
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// replicaCPU is the CPU time the stack's extauthz processes have used
// (Linux /proc; 0 elsewhere).
func (m *benchMode) replicaCPU(t *testing.T) time.Duration {
	t.Helper()
	var sum time.Duration
	for _, r := range m.s.replicas {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", r.cmd.Process.Pid))
		if err != nil {
			return 0
		}
		// Fields after the command name (which may hold spaces): utime is
		// the 14th field, stime the 15th, in clock ticks (100 per second).
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		for _, i := range []int{11, 12} {
			v, _ := strconv.ParseInt(f[i], 10, 64)
			sum += time.Duration(v) * 10 * time.Millisecond
		}
	}
	return sum
}
