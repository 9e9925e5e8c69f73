package k8s

import (
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
)

// alertRow is a row of docs/deploy.md's alert table: "| `ExtauthzX` | ...".
var alertRow = regexp.MustCompile("(?m)^\\| `(Extauthz[A-Za-z0-9]+)` \\|")

// documentedAlerts returns the alerts docs/deploy.md's Observability
// section lists, in order.
func documentedAlerts(t *testing.T) []string {
	t.Helper()
	doc := string(readFile(t, filepath.Join(repoRoot(t), "docs", "deploy.md")))
	_, section, ok := strings.Cut(doc, "\n## 5. Observability\n")
	if !ok {
		t.Fatal("docs/deploy.md has no ## 5. Observability section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var out []string
	for _, m := range alertRow.FindAllStringSubmatch(section, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestDeployDocListsEveryAlert: docs/deploy.md's alert table names exactly
// the alerts of k8s/monitoring/prometheusrule.yaml, so that an alert added
// (or removed) there cannot be missing from (or linger in) the docs.
func TestDeployDocListsEveryAlert(t *testing.T) {
	t.Parallel()
	rule := decodeOne[*monitoringv1.PrometheusRule](t, ruleFile)
	var shipped []string
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				shipped = append(shipped, r.Alert)
			}
		}
	}
	documented := documentedAlerts(t)
	if len(shipped) == 0 || len(documented) == 0 {
		t.Fatalf("%d alerts in %s, %d in docs/deploy.md: the parser has lost them", len(shipped), ruleFile, len(documented))
	}
	for _, a := range shipped {
		if !slices.Contains(documented, a) {
			t.Errorf("docs/deploy.md does not list the alert %s of %s", a, ruleFile)
		}
	}
	for _, a := range documented {
		if !slices.Contains(shipped, a) {
			t.Errorf("docs/deploy.md lists the alert %s, which %s does not have", a, ruleFile)
		}
	}
}
