package e2e

import (
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLatency measures the latency Envoy adds with the extauthz filters,
// against the same Envoy configuration with only the router (rendered from
// the same file), in the same run, one request at a time. It is a
// measurement, not an assertion: it only runs with E2E_LATENCY=1 and prints
// a table (docs/benchmarks-envoy.md has the command and figures).
// E2E_LATENCY_N sets the requests per case (default 2000).
func TestLatency(t *testing.T) {
	if os.Getenv("E2E_LATENCY") == "" {
		t.Skip("set E2E_LATENCY=1 to measure latency through Envoy")
	}
	n := 2000
	if v, err := strconv.Atoi(os.Getenv("E2E_LATENCY_N")); err == nil && v > 0 {
		n = v
	}
	// The shipped deadlines: latency is measured as users run it.
	full := newStack(t, stackOpts{shippedDeadlines: true})
	base := newStack(t, stackOpts{stripFilters: true, noExtauthz: true, shippedDeadlines: true})
	cases := latencyCases(full, base)
	samples := make([][]time.Duration, len(cases))
	for i := -n / 10; i < n; i++ { // the first n/10 rounds warm up
		for c, lc := range cases {
			start := time.Now()
			r := lc.s.do(t, lc.next(i))
			d := time.Since(start)
			if r.status != lc.want {
				t.Fatalf("%s: got %s, want %d", lc.name, r, lc.want)
			}
			if i >= 0 {
				samples[c] = append(samples[c], d)
			}
		}
	}
	t.Logf("latency through Envoy, %d sequential requests per case, interleaved:\n%s", n, latencyTable(cases, samples))
}

type latencyCase struct {
	name string
	s    *stack
	want int
	next func(i int) req
}

func latencyCases(full, base *stack) []latencyCase {
	get := func(int) req { return req{path: "/things"} }
	fresh := func(w wiring, tenant string) func(int) req {
		return func(i int) req { return post(w, tenant, fmt.Sprintf("lat-%d", i), `{"amount":1}`) }
	}
	same := func(w wiring, tenant string) func(int) req {
		return func(int) req { return post(w, tenant, "lat-replayed", `{"amount":1}`) }
	}
	return []latencyCase{
		{"baseline: router only, GET", base, http.StatusOK, get},
		{"filters disabled on the route (/healthz)", full, http.StatusOK, func(int) req { return req{path: "/healthz"} }},
		{"ratelimit (RLS) + ext_authz, GET", full, http.StatusOK, get},
		{"wiring b (ext_authz+ext_proc), POST new key", full, http.StatusOK, fresh(wiringB, "lat-b")},
		{"wiring b, POST replayed", full, http.StatusOK, same(wiringB, "lat-b-replay")},
		{"wiring a (ext_proc only), POST new key", full, http.StatusOK, fresh(wiringA, "lat-a")},
		{"wiring a, POST replayed", full, http.StatusOK, same(wiringA, "lat-a-replay")},
		{"baseline: router only, POST", base, http.StatusOK, fresh(wiringA, "lat-base")},
	}
}

func latencyTable(cases []latencyCase, samples [][]time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| case | p50 | p90 | p99 | max |\n|---|---|---|---|---|\n")
	for c, lc := range cases {
		s := samples[c]
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", lc.name,
			pct(s, 50), pct(s, 90), pct(s, 99), pct(s, 100))
	}
	return b.String()
}

// pct returns the p-th percentile of sorted samples (nearest rank).
func pct(sorted []time.Duration, p int) string {
	if len(sorted) == 0 {
		return "-"
	}
	i := (len(sorted)*p + 99) / 100
	if i < 1 {
		i = 1
	}
	return fmt.Sprintf("%.2fms", float64(sorted[i-1].Microseconds())/1000)
}
