package k8s

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/prometheus/promql/parser"
	corev1 "k8s.io/api/core/v1"
)

const (
	ruleFile           = "k8s/monitoring/prometheusrule.yaml"
	serviceMonitorFile = "k8s/monitoring/servicemonitor.yaml"
	serviceFile        = "k8s/base/service.yaml"
)

// decodeOne strictly decodes the single object of a file into out.
func decodeOne[T any](t *testing.T, file string) T {
	t.Helper()
	objs := decodeObjects(t, newScheme(t), file, readFile(t, filepath.Join(repoRoot(t), file)))
	if len(objs) != 1 {
		t.Fatalf("%s: %d objects, want 1", file, len(objs))
	}
	out, ok := objs[0].Obj.(T)
	if !ok {
		t.Fatalf("%s: %T is not the kind expected", file, objs[0].Obj)
	}
	return out
}

// TestAlertsParseAndUseExportedMetrics: every alert expression is valid
// PromQL (Prometheus's own parser), names only metrics the service defines
// (a histogram's _bucket/_sum/_count included) and label values defined in
// the code; every alert has a severity, a summary and a description; and the
// alerts cover fallback decisions, both circuit breakers, reload errors,
// idempotency store errors and decision latency.
func TestAlertsParseAndUseExportedMetrics(t *testing.T) {
	t.Parallel()
	src := serviceSource(t)
	defined := map[string]bool{}
	for _, m := range metricDef.FindAllStringSubmatch(src, -1) {
		defined[m[1]+m[2]] = true // one of the two groups matched
	}
	rule := decodeOne[*monitoringv1.PrometheusRule](t, ruleFile)
	used := map[string]bool{}
	n := 0
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			n++
			checkAlert(t, r, src, defined, used)
		}
	}
	if n == 0 {
		t.Fatal("no rules")
	}
	for _, m := range []string{
		"extauthz_redis_fallback_decisions_total", "extauthz_redis_circuit_open",
		"extauthz_idempotency_store_circuit_open", "extauthz_policy_reload_errors_total",
		"extauthz_idempotency_store_errors_total", "extauthz_decision_duration_seconds",
	} {
		if !used[m] {
			t.Errorf("no alert on %s", m)
		}
	}
}

func checkAlert(t *testing.T, r monitoringv1.Rule, src string, defined, used map[string]bool) {
	t.Helper()
	if r.Alert == "" {
		t.Errorf("rule %q is not an alert", r.Expr.String())
		return
	}
	if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
		t.Errorf("%s: want a severity label, a summary and a description", r.Alert)
	}
	expr, err := parser.NewParser(parser.Options{}).ParseExpr(r.Expr.String())
	if err != nil {
		t.Errorf("%s: %v", r.Alert, err)
		return
	}
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		base := vs.Name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(vs.Name, suffix); ok && defined[b] {
				base = b
			}
		}
		if !defined[base] {
			t.Errorf("%s: %s is not a metric of the service", r.Alert, vs.Name)
		}
		used[base] = true
		for _, m := range vs.LabelMatchers {
			if m.Name == "__name__" {
				continue
			}
			for _, v := range strings.Split(m.Value, "|") {
				if !strings.Contains(src, `"`+v+`"`) {
					t.Errorf("%s: %s value %q is not defined in the code", r.Alert, m.Name, v)
				}
			}
		}
		return nil
	})
}

// TestServiceMonitorScrapesTheMetricsPort: the ServiceMonitor selects the
// Service by its labels and scrapes /metrics on a port the Service has.
func TestServiceMonitorScrapesTheMetricsPort(t *testing.T) {
	t.Parallel()
	sm := decodeOne[*monitoringv1.ServiceMonitor](t, serviceMonitorFile)
	var svc *corev1.Service
	for _, o := range decodeObjects(t, newScheme(t), serviceFile, readFile(t, filepath.Join(repoRoot(t), serviceFile))) {
		if s, ok := o.Obj.(*corev1.Service); ok && s.Name == "extauthz" {
			svc = s
		}
	}
	if svc == nil {
		t.Fatalf("%s: no Service extauthz", serviceFile)
	}
	for k, v := range sm.Spec.Selector.MatchLabels {
		if svc.Labels[k] != v {
			t.Errorf("selector %s=%s does not match the Service's labels %v", k, v, svc.Labels)
		}
	}
	if len(sm.Spec.Endpoints) != 1 {
		t.Fatalf("%d endpoints, want 1", len(sm.Spec.Endpoints))
	}
	ep := sm.Spec.Endpoints[0]
	var ports []string
	for _, p := range svc.Spec.Ports {
		ports = append(ports, p.Name)
	}
	if !slices.Contains(ports, ep.Port) || ep.Path != "/metrics" {
		t.Errorf("endpoint port %q path %q; the Service's ports are %v", ep.Port, ep.Path, ports)
	}
}
