package k8s

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
)

// timeoutRow is one row of the reference's Timeouts table.
type timeoutRow struct {
	bound, below, shipped string
}

// readmeTimeoutRows parses the table under the reference's "### Timeouts".
func readmeTimeoutRows(t *testing.T) []timeoutRow {
	t.Helper()
	readme := string(readFile(t, filepath.Join(repoRoot(t), "docs", "reference.md")))
	_, section, ok := strings.Cut(readme, "\n### Timeouts\n")
	if !ok {
		t.Fatal("docs/reference.md has no ### Timeouts section")
	}
	var rows []timeoutRow
	for _, line := range strings.Split(section, "\n") {
		if strings.HasPrefix(line, "## ") || strings.HasPrefix(line, "### ") {
			break
		}
		cells := strings.Split(line, " | ")
		if len(cells) != 4 || strings.HasPrefix(line, "|---") || strings.HasPrefix(line, "| bound ") {
			continue
		}
		rows = append(rows, timeoutRow{bound: strings.TrimPrefix(cells[0], "| "), below: cells[1], shipped: cells[2]})
	}
	if len(rows) < 7 {
		t.Fatalf("the reference's Timeouts table: %d rows parsed, want 7", len(rows))
	}
	return rows
}

// shippedGroup is "VALUE (source, source)" in the shipped column; groups
// are separated by "; ".
var shippedGroup = regexp.MustCompile(`^(.+?) \(([^()]+)\)$`)

// TestTimeoutTableValues: every value of docs/reference.md Timeouts table's
// "shipped" column is the one in each file the row names, so that the table
// cannot go stale when a file changes (TestTimeoutTable checks the
// inequalities themselves).
func TestTimeoutTableValues(t *testing.T) {
	t.Parallel()
	actual := shippedValues(t)
	for _, r := range readmeTimeoutRows(t) {
		quantity := timeoutQuantity(r.below)
		if quantity == "" {
			t.Errorf("docs/reference.md Timeouts row %q: no known quantity in %q", r.shipped, r.below)
			continue
		}
		for _, g := range strings.Split(r.shipped, "; ") {
			m := shippedGroup.FindStringSubmatch(g)
			if m == nil {
				t.Errorf("docs/reference.md Timeouts, %s: %q is not VALUE (SOURCES)", quantity, g)
				continue
			}
			for _, src := range strings.Split(m[2], ", ") {
				values, ok := actual[src][quantity]
				if !ok {
					t.Errorf("docs/reference.md Timeouts, %s: the test cannot read it from %q", quantity, src)
				}
				for where, v := range values {
					if v != m[1] {
						t.Errorf("docs/reference.md Timeouts says %s is %s in %s; %s has %s", quantity, m[1], src, where, v)
					}
				}
			}
		}
	}
}

// timeoutQuantity names what the "must be below" cell is about.
func timeoutQuantity(below string) string {
	for _, q := range []struct{ in, name string }{
		{"ratelimit filter", "ratelimit"}, {"ext_authz", "ext_authz"}, {"ext_proc", "ext_proc"},
		{"max_interval", "max_interval"}, {"terminationGracePeriodSeconds", "grace"},
		{"liveness", "liveness"}, {"EXTAUTHZ_DRAIN_DELAY", "drain"},
	} {
		if strings.Contains(below, q.in) {
			return q.name
		}
	}
	return ""
}

// shippedValues reads every quantity from each source, as docs/reference.md
// writes values ("100 ms", "2 s", "0.5 s", "10 s × 3"): source -> quantity
// -> file -> value.
func shippedValues(t *testing.T) map[string]map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]map[string]string{}
	set := func(src, q, where, v string) {
		if out[src] == nil {
			out[src] = map[string]map[string]string{}
		}
		if out[src][q] == nil {
			out[src][q] = map[string]string{}
		}
		out[src][q][where] = v
	}
	for _, name := range []string{"front-proxy.yaml", "sidecar.yaml"} {
		where := "envoy/" + name
		f := bootstrapTimeouts(t, where, envoyBootstrap(t, name))
		set("envoy/", "ratelimit", where, readable(f.ratelimit))
		set("envoy/", "ext_authz", where, readable(f.extAuthz))
		set("envoy/", "ext_proc", where, readable(f.extProcMessage))
		for i, rp := range f.retries {
			set("envoy/", "max_interval", fmt.Sprintf("%s retry_policy %d", where, i), readable(dur(rp.GetRetryBackOff().GetMaxInterval())))
		}
	}
	mesh := istioTimeouts(t)
	set("Istio EnvoyFilter", "ratelimit", "k8s/istio/base", readable(mesh.ratelimit))
	set("Istio EnvoyFilter", "ext_proc", "k8s/istio/base", readable(mesh.extProcMessage))
	for i, rp := range mesh.retries {
		set("Istio EnvoyFilter", "max_interval", fmt.Sprintf("k8s/istio/base retry_policy %d", i), readable(dur(rp.GetRetryBackOff().GetMaxInterval())))
	}
	set("`meshconfig.yaml`", "ext_authz", "k8s/istio/meshconfig.yaml", readable(mesh.extAuthz))

	d := named[*appsv1.Deployment](t, renderObjects(t, "k8s/base"), appName)
	c := extauthzContainer(t, d)
	set("k8s/base", "drain", "k8s/base Deployment", readable(duration(t, configVars(t), c, "EXTAUTHZ_DRAIN_DELAY")))
	if g := d.Spec.Template.Spec.TerminationGracePeriodSeconds; g != nil {
		set("k8s/base", "grace", "k8s/base Deployment", readable(time.Duration(*g)*time.Second))
	}
	if p := c.LivenessProbe; p != nil {
		set("k8s/base", "liveness", "k8s/base Deployment", fmt.Sprintf("%s × %d", readable(time.Duration(p.PeriodSeconds)*time.Second), p.FailureThreshold))
	}
	return out
}

// readable writes d as docs/reference.md does: "100 ms" below a second, else
// seconds ("2 s", "0.5 s").
func readable(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%d ms", d.Milliseconds())
	}
	return fmt.Sprintf("%g s", d.Seconds())
}

// boundDefault is "`EXTAUTHZ_X` (50 ms)" in the bound column (not a sum
// such as "(5 + 10 + 10 s)").
var boundDefault = regexp.MustCompile("`(EXTAUTHZ_[A-Z_]+)` \\(([0-9.]+ m?s)\\)")

// TestTimeoutTableBounds: the binary's values the Timeouts table quotes
// ("`EXTAUTHZ_REDIS_CALL_TIMEOUT` (50 ms)") are its defaults, and the
// Envoy section's filter table gives envoy/*.yaml's timeouts.
func TestTimeoutTableBounds(t *testing.T) {
	t.Parallel()
	vars := configVars(t)
	quoted := 0
	for _, r := range readmeTimeoutRows(t) {
		for _, ix := range boundDefault.FindAllStringSubmatchIndex(r.bound, -1) {
			if strings.HasSuffix(r.bound[:ix[0]], "+ ") {
				continue // "A + `B` (20 s)" quotes the sum
			}
			m := []string{"", r.bound[ix[2]:ix[3]], r.bound[ix[4]:ix[5]]}
			quoted++
			def, err := time.ParseDuration(vars[m[1]].Default)
			if err != nil {
				t.Errorf("docs/reference.md Timeouts quotes %s, whose default %q is no duration", m[1], vars[m[1]].Default)
				continue
			}
			if readable(def) != m[2] {
				t.Errorf("docs/reference.md Timeouts quotes %s as %s; its default is %s", m[1], m[2], readable(def))
			}
		}
	}
	if quoted < 3 {
		t.Errorf("found %d quoted defaults in the Timeouts table; the parser has lost them", quoted)
	}
	readme := string(readFile(t, filepath.Join(repoRoot(t), "docs", "reference.md")))
	actual := shippedValues(t)["envoy/"]
	for q, row := range map[string]*regexp.Regexp{
		"ratelimit": regexp.MustCompile(`(?m)^\| ratelimit \(RLS\) \| ([^|(]+?)(?: per message)?(?: \(.*\))? \|`),
		"ext_authz": regexp.MustCompile(`(?m)^\| ext_authz \| ([^|(]+?)(?: per message)?(?: \(.*\))? \|`),
		"ext_proc":  regexp.MustCompile(`(?m)^\| ext_proc \| ([^|(]+?)(?: per message)?(?: \(.*\))? \|`),
	} {
		m := row.FindStringSubmatch(readme)
		if m == nil {
			t.Errorf("the reference's Envoy filter table has no %s row", q)
			continue
		}
		for where, v := range actual[q] {
			if v != m[1] {
				t.Errorf("the reference's Envoy filter table gives %s %s; %s has %s", q, m[1], where, v)
			}
		}
	}
}
