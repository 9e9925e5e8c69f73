package main

import (
	"context"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/extauthz/extauthz/internal/redistest"
)

// documentedMetric is one row of the reference's metrics table.
type documentedMetric struct {
	labels      []string // sorted
	redisOnly   bool
	chargedOnly bool // exported when the policy has a charged limit
	tlsOnly     bool // exported when the gRPC port serves TLS
	globalOnly  bool // exported with EXTAUTHZ_GLOBAL_REDIS_URL (TestRegionsEndToEnd checks them)
}

// readmeMetrics parses the reference's metrics table.
func readmeMetrics(t *testing.T) (map[string]documentedMetric, string) {
	t.Helper()
	readme, err := os.ReadFile("../../docs/reference.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `(extauthz_[a-z0-9_]+)` \\|([^|]*)\\| (.*) \\|$")
	label := regexp.MustCompile("`([a-z_]+)`")
	out := map[string]documentedMetric{}
	for _, m := range row.FindAllStringSubmatch(string(readme), -1) {
		var d documentedMetric
		for _, l := range label.FindAllStringSubmatch(m[2], -1) {
			d.labels = append(d.labels, l[1])
		}
		sort.Strings(d.labels)
		d.redisOnly = strings.HasPrefix(m[3], "Redis only")
		d.chargedOnly = strings.HasPrefix(m[3], "Charged limits only")
		d.tlsOnly = strings.HasPrefix(m[3], "gRPC TLS only")
		d.globalOnly = strings.HasPrefix(m[3], "Global limits only")
		out[m[1]] = d
	}
	if len(out) == 0 {
		t.Fatal("no metrics table in docs/reference.md")
	}
	return out, string(readme)
}

// scrapedFamily is what /metrics shows of one metric family.
type scrapedFamily struct {
	labels map[string]map[string]bool // label name -> values seen
}

var (
	typeLine  = regexp.MustCompile(`^# TYPE (\S+) (\S+)$`)
	labelPair = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

// scrape parses the extauthz_* families of a /metrics text exposition.
func scrape(t *testing.T, p *proc) map[string]scrapedFamily {
	t.Helper()
	_, body := p.get(t, "/metrics")
	fams := map[string]scrapedFamily{}
	for _, line := range strings.Split(body, "\n") {
		if m := typeLine.FindStringSubmatch(line); m != nil && strings.HasPrefix(m[1], "extauthz_") {
			fams[m[1]] = scrapedFamily{labels: map[string]map[string]bool{}}
			continue
		}
		if !strings.HasPrefix(line, "extauthz_") {
			continue
		}
		name, rest, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		fam, ok := fams[name]
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if !ok {
				fam, ok = fams[strings.TrimSuffix(name, suffix)]
			}
		}
		if !ok {
			t.Fatalf("sample %q has no # TYPE line", line)
		}
		for _, lp := range labelPair.FindAllStringSubmatch(rest, -1) {
			if lp[1] == "le" {
				continue
			}
			if fam.labels[lp[1]] == nil {
				fam.labels[lp[1]] = map[string]bool{}
			}
			fam.labels[lp[1]][lp[2]] = true
		}
	}
	return fams
}

// exercise sends one valid and one invalid RLS call, so that the series
// keyed by the request's domain and the invalid-request counter exist.
func exercise(t *testing.T, p *proc) {
	t.Helper()
	client := rlsv3.NewRateLimitServiceClient(p.dial(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonrlv3.RateLimitDescriptor{{
		// A rule of examples/policy/edge.yaml, so that per-rule series exist.
		Entries: []*commonrlv3.RateLimitDescriptor_Entry{{Key: "no_api_key", Value: "true"}, {Key: "remote_address", Value: "10.0.0.1"}},
	}}}
	if _, err := client.ShouldRateLimit(ctx, req); err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	// An empty request is decided (OK, nothing to count), never an error
	// Envoy would turn into "admit"; it is counted in
	// extauthz_invalid_requests_total{reason="no_descriptors"}.
	resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{})
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("an empty request: %v, %v; want OK and no error", resp.GetOverallCode(), err)
	}
}

// TestMetricsMatchREADME: every extauthz metric a running process exports
// (with the embedded store, with Redis, and with a TLS gRPC port) is in the
// reference's table with the same labels, every documented one is
// exported (Redis-only ones with Redis, TLS-only ones with TLS), and every
// value of the api, outcome, event, mode and reason labels seen is written
// in docs/reference.md.
func TestMetricsMatchREADME(t *testing.T) {
	docs, readme := readmeMetrics(t)
	srv := redistest.Standalone(t)
	base := []string{"EXTAUTHZ_CONFIG=" + examplePolicy(t), "EXTAUTHZ_ADMIN_ADDR=127.0.0.1:0"}
	charged := policyHasCharges(t)
	procs := map[string]*proc{
		"memory": start(t, base...),
		"redis":  start(t, append(base, "EXTAUTHZ_REDIS_URL="+srv.URL, "EXTAUTHZ_CHARGE_KEY_SECRET="+testChargeKeySecret)...),
	}
	for mode, p := range procs {
		exercise(t, p)
		exerciseRLQS(t, p) // rlqs_test.go
		fams := scrape(t, p)
		for name, fam := range fams {
			d, ok := docs[name]
			if !ok {
				t.Errorf("%s: %s is exported but not in docs/reference.md", mode, name)
				continue
			}
			got := slices.Sorted(func(yield func(string) bool) {
				for l := range fam.labels {
					if !yield(l) {
						return
					}
				}
			})
			if !slices.Equal(got, d.labels) {
				t.Errorf("%s: %s has labels %v, docs/reference.md says %v", mode, name, got, d.labels)
			}
			checkValues(t, mode, name, fam, readme)
		}
		wantRouteSeries(t, mode, fams)
		for name, d := range docs {
			if _, ok := fams[name]; !ok && (mode == "redis" || !d.redisOnly) && (charged || !d.chargedOnly) && !d.tlsOnly && !d.globalOnly {
				t.Errorf("%s: %s is documented but not exported", mode, name)
			}
		}
	}
	checkTLSMetrics(t, docs, readme)
}

// checkTLSMetrics: a process whose gRPC port serves TLS (listen_test.go's
// mutual-TLS rig) exports every TLS-only metric of the table, and nothing
// undocumented. Its gRPC APIs are not exercised here (that needs a client
// certificate; listen_test.go does): the other modes cover those metrics.
func checkTLSMetrics(t *testing.T, docs map[string]documentedMetric, readme string) {
	t.Helper()
	fams := scrape(t, startMTLS(t, "EXTAUTHZ_ADMIN_ADDR=127.0.0.1:0").p)
	for name, fam := range fams {
		d, ok := docs[name]
		if !ok {
			t.Errorf("tls: %s is exported but not in docs/reference.md", name)
			continue
		}
		if got := slices.Sorted(maps.Keys(fam.labels)); !slices.Equal(got, d.labels) {
			t.Errorf("tls: %s has labels %v, docs/reference.md says %v", name, got, d.labels)
		}
		checkValues(t, "tls", name, fam, readme)
	}
	for name, d := range docs {
		if _, ok := fams[name]; d.tlsOnly && !ok {
			t.Errorf("tls: %s is documented but not exported", name)
		}
	}
}

// policyHasCharges reports whether examples/policy has a charged limit
// (a `charge:` mapping), whose metrics then exist from the start.
func policyHasCharges(t *testing.T) bool {
	t.Helper()
	found := false
	err := filepath.WalkDir("../../examples/policy", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		found = found || regexp.MustCompile(`(?m)^\s*charge:`).Match(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// checkValues fails for a label value of a documented enumeration that the
// docs/reference.md does not mention (as `value`).
func checkValues(t *testing.T, mode, name string, fam scrapedFamily, readme string) {
	t.Helper()
	for label, values := range fam.labels {
		if label == "domain" || label == "rule" || label == "limit" || (name == "extauthz_invalid_requests_total" && label == "reason") {
			continue // from the policy (a charged limit's name too); validation reasons are listed in the code
		}
		for v := range values {
			if label == "route" && !strings.HasPrefix(v, "_") {
				continue // a policy route's name; the fixed values (_unknown, _overflow) are checked
			}
			if !strings.Contains(readme, "`"+v+"`") && !strings.Contains(readme, `"`+v+`"`) {
				t.Errorf("%s: %s{%s=%q} is exported but the value is not in docs/reference.md", mode, name, label, v)
			}
		}
	}
}

// wantRouteSeries: the per-route idempotency series exist from the start
// for exactly the idempotent routes of examples/policy (orders, payments;
// not default, which has none), before any idempotency call.
func wantRouteSeries(t *testing.T, mode string, fams map[string]scrapedFamily) {
	t.Helper()
	got := slices.Sorted(maps.Keys(fams["extauthz_idempotency_route_events_total"].labels["route"]))
	if want := []string{"orders", "payments"}; !slices.Equal(got, want) {
		t.Errorf("%s: extauthz_idempotency_route_events_total has routes %v, want %v from the start", mode, got, want)
	}
}
