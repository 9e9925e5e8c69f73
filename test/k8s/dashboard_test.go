package k8s

import (
	"encoding/json"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

type dashboard struct {
	Title  string  `json:"title"`
	UID    string  `json:"uid"`
	Panels []panel `json:"panels"`
}

type panel struct {
	Type    string                   `json:"type"`
	Title   string                   `json:"title"`
	GridPos struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal(readFile(t, filepath.Join(repoRoot(t), dashboardFile)), &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

var (
	// metricDef is how the service names its metrics: Name: "extauthz_..."
	// in prometheus' Opts, or a counter's "extauthz_..._total" in a table
	// of metrics built in a loop (the charged limits' metrics are).
	metricDef = regexp.MustCompile(`Name:\s*"(extauthz_[a-z0-9_]+)"|"(extauthz_[a-z0-9_]+_total)"`)
	// metricUse is a metric name in a PromQL expression.
	metricUse = regexp.MustCompile(`\bextauthz_[a-z0-9_]+`)
	// labelMatch is a matcher on a label whose values the code defines.
	labelMatch = regexp.MustCompile(`\b(api|outcome|event|reason|mode|stat)=~?"([^"]*)"`)
	selector   = regexp.MustCompile(`\{[^}]*\}`)
)

// serviceSource returns the non-test Go source of pkg/ and cmd/, where the
// metrics and their label values are defined.
func serviceSource(t *testing.T) string {
	t.Helper()
	root := repoRoot(t)
	var b strings.Builder
	for _, dir := range []string{"pkg", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			src, err := os.ReadFile(p)
			b.Write(src)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// TestDashboardMatchesMetrics: every extauthz metric the dashboard queries
// is one the service defines, every metric the service defines is on the
// dashboard, and the label values it filters on exist in the code.
func TestDashboardMatchesMetrics(t *testing.T) {
	t.Parallel()
	d := loadDashboard(t)
	src := serviceSource(t)
	defined := map[string]bool{}
	for _, m := range metricDef.FindAllStringSubmatch(src, -1) {
		defined[m[1]+m[2]] = true // one of the two groups matched
	}
	if len(defined) == 0 {
		t.Fatal("no extauthz metrics found in pkg/ and cmd/")
	}
	used := map[string]bool{}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			checkExpr(t, p.Title, tg.Expr, src, defined, used)
		}
	}
	for m := range defined {
		if !used[m] {
			t.Errorf("metric %s is defined by the service but not on the dashboard", m)
		}
	}
}

func checkExpr(t *testing.T, title, expr, src string, defined, used map[string]bool) {
	t.Helper()
	for _, m := range metricUse.FindAllString(expr, -1) {
		base := m
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(m, suffix); ok && defined[b] {
				base = b
			}
		}
		if !defined[base] {
			t.Errorf("panel %q: %s is not a metric of the service", title, m)
		}
		used[base] = true
	}
	for _, m := range labelMatch.FindAllStringSubmatch(expr, -1) {
		for _, v := range strings.Split(m[2], "|") {
			if !strings.Contains(src, `"`+v+`"`) {
				t.Errorf("panel %q: %s value %q is not defined in the code", title, m[1], v)
			}
		}
	}
	for _, sel := range selector.FindAllString(expr, -1) {
		if !strings.Contains(sel, `namespace=~"$namespace"`) || !strings.Contains(sel, `job=~"$job"`) {
			t.Errorf("panel %q: selector %s ignores the $namespace / $job variables", title, sel)
		}
	}
}

// TestDashboardLayout: panels have queries and do not overlap.
func TestDashboardLayout(t *testing.T) {
	t.Parallel()
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" || len(d.Panels) == 0 {
		t.Fatal("dashboard without uid, title or panels")
	}
	type cell struct{ x, y int }
	taken := map[cell]string{}
	for _, p := range d.Panels {
		g := p.GridPos
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, g)
		}
		for x := g.X; x < g.X+g.W; x++ {
			for y := g.Y; y < g.Y+g.H; y++ {
				if other, ok := taken[cell{x, y}]; ok {
					t.Errorf("panel %q overlaps %q", p.Title, other)
					return
				}
				taken[cell{x, y}] = p.Title
			}
		}
	}
}

// TestDashboardConfigMap: the overlays ship the dashboard as a ConfigMap
// that Grafana's sidecar picks up.
func TestDashboardConfigMap(t *testing.T) {
	t.Parallel()
	want := string(readFile(t, filepath.Join(repoRoot(t), dashboardFile)))
	for _, dir := range []string{"k8s/overlays/dev", "k8s/overlays/production"} {
		cm := named[*corev1.ConfigMap](t, renderObjects(t, dir), "extauthz-grafana-dashboard")
		if cm.Labels["grafana_dashboard"] != "1" {
			t.Errorf("%s: the dashboard ConfigMap lacks the grafana_dashboard label", dir)
		}
		keys := slices.Collect(maps.Keys(cm.Data))
		if len(keys) != 1 || cm.Data[filepath.Base(dashboardFile)] != want {
			t.Errorf("%s: the dashboard ConfigMap does not carry %s as is (keys %v)", dir, dashboardFile, keys)
		}
	}
}
