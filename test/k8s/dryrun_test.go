package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"
)

// The CRDs the manifests need, read from the upstream projects' Go modules
// (fetched through the module proxy like any dependency). Istio's come from
// istio.io/api at the version this module's Istio types are (TestManifests*
// decode with them). prometheus-operator's CRD YAML ships only in its main
// module, of which the module proxy serves v0.85.0 and nothing newer; the
// ServiceMonitor and PrometheusRule fields we use are the same in it and
// in the v0.95 Go types the decode tests use.
const (
	promOperatorModule  = "github.com/prometheus-operator/prometheus-operator"
	promOperatorVersion = "v0.85.0"
	istioAPIModule      = "istio.io/api"
)

var crdFiles = []struct{ module, version, path string }{
	{promOperatorModule, promOperatorVersion, "example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml"},
	{promOperatorModule, promOperatorVersion, "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml"},
	{istioAPIModule, "", "kubernetes/customresourcedefinitions.gen.yaml"}, // "": this module's version
}

// fieldManager owns what the test applies (server-side apply needs one).
const fieldManager = "extauthz-test"

// TestServerSideDryRun starts a real etcd and kube-apiserver, installs the
// CRDs of Prometheus Operator and Istio, and applies the render of every
// kustomization under k8s/ (the base, each overlay, the components through
// the overlays that use them, the Istio variants, monitoring, grafana)
// with a server-side dry run, as `kubectl apply --server-side --dry-run=server
// --validate=strict -k DIR` would: schema and CRD validation, defaulting
// and admission (PodSecurity among it) all run. An error or a warning for
// any object fails the test. The objects' namespaces are created for real
// first (a dry-run Namespace does not exist for the objects that follow);
// a rendered Namespace is applied for real, so PodSecurity judges the pods
// by its labels.
func TestServerSideDryRun(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	c.installCRDs(t)
	dirs := kustomizationDirs(t)
	if len(dirs) < 8 {
		t.Fatalf("found only %d kustomizations under k8s/: %v", len(dirs), dirs)
	}
	applied := 0
	for _, dir := range dirs {
		objs := renderUnstructured(t, dir)
		c.createNamespaces(t, objs)
		for _, o := range objs {
			if problems := c.apply(t, o, true); len(problems) > 0 {
				t.Errorf("%s: %s %s/%s:%s", dir, o.GetKind(), o.GetNamespace(), o.GetName(), joinLines(problems))
			}
			applied++
		}
	}
	if applied < 30 {
		t.Errorf("dry-ran only %d objects over %v", applied, dirs)
	}
	t.Logf("dry-ran %d objects of %d kustomizations", applied, len(dirs))
	t.Run("rejects", func(t *testing.T) { testDryRunRejects(t, c) })
}

// testDryRunRejects breaks one field of a rendered object per case and
// checks that the dry run reports it: the API server's own validation, a
// CRD's schema and PodSecurity admission are really in force.
func testDryRunRejects(t *testing.T, c *cluster) {
	cases := []struct {
		name, dir, kind, object string
		path                    []any // where to set value: map keys and list indexes
		value                   any
		want                    string
	}{
		{"unknown field", "k8s/overlays/production", "Deployment", "extauthz",
			[]any{"spec", "template", "spec", "hostNetwrok"}, true, "field not declared in schema"},
		{"invalid value", "k8s/overlays/production", "HorizontalPodAutoscaler", "extauthz",
			[]any{"spec", "maxReplicas"}, int64(0), "spec.maxReplicas: Invalid value"},
		{"PodSecurity restricted", "k8s/overlays/production", "Deployment", "extauthz",
			[]any{"spec", "template", "spec", "hostNetwork"}, true, "would violate PodSecurity"},
		{"PrometheusRule schema", "k8s/monitoring", "PrometheusRule", "",
			[]any{"spec", "groups", 0, "rules", 0, "for"}, "soon", "spec.groups[0].rules[0].for"},
		{"ServiceMonitor schema", "k8s/monitoring", "ServiceMonitor", "",
			[]any{"spec", "endpoints", 0, "interval"}, "often", "spec.endpoints[0].interval"},
		{"EnvoyFilter schema", "k8s/istio/base", "EnvoyFilter", "extauthz-ratelimit",
			[]any{"spec", "configPatches", 0, "applyTo"}, "HTTP_FILTERS", "Unsupported value"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs := renderUnstructured(t, tc.dir)
			i := slices.IndexFunc(objs, func(o *unstructured.Unstructured) bool {
				return o.GetKind() == tc.kind && (tc.object == "" || o.GetName() == tc.object)
			})
			if i < 0 {
				t.Fatalf("%s renders no %s %q", tc.dir, tc.kind, tc.object)
			}
			obj := objs[i]
			if err := setPath(obj.Object, tc.value, tc.path...); err != nil {
				t.Fatal(err)
			}
			problems := c.apply(t, obj, true)
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Errorf("%s %s with %v = %v: dry run reported %q, want a problem containing %q",
					tc.kind, obj.GetName(), tc.path, tc.value, problems, tc.want)
			}
		})
	}
}

// setPath sets value at path in a decoded JSON object; path elements are
// map keys (string) or list indexes (int), every container but the last
// key must exist.
func setPath(obj map[string]any, value any, path ...any) error {
	var cur any = obj
	for i, p := range path {
		last := i == len(path)-1
		switch k := p.(type) {
		case string:
			m, ok := cur.(map[string]any)
			if !ok {
				return fmt.Errorf("%v: not an object at %q", path, k)
			}
			if last {
				m[k] = value
				return nil
			}
			cur = m[k]
		case int:
			l, ok := cur.([]any)
			if !ok || k >= len(l) {
				return fmt.Errorf("%v: no list element %d", path, k)
			}
			if last {
				l[k] = value
				return nil
			}
			cur = l[k]
		}
	}
	return fmt.Errorf("empty path")
}

// cluster is a client of the test's API server.
type cluster struct {
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
	warn   *warnings
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	apiserver := kubeBin(t, "KUBE_APISERVER_BIN", "kube-apiserver", kubeModule, kubeVersion)
	etcd := kubeBin(t, "ETCD_BIN", "etcd", etcdModule, etcdVersion)
	cfg := startAPIServer(t, apiserver, startEtcd(t, etcd))
	c := &cluster{warn: &warnings{}}
	cfg.WarningHandlerWithContext = c.warn
	var err error
	if c.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	return c
}

// apply server-side applies obj (a dry run when dryRun), with strict field
// validation, and returns the error and the warnings, if any. Applies run
// one at a time: the warnings of an answer are those collected during it.
func (c *cluster) apply(t *testing.T, obj *unstructured.Unstructured, dryRun bool) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c.warn.take()
	res, err := c.resource(obj)
	if err != nil {
		return []string{err.Error()}
	}
	data, err := obj.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	opts := metav1.PatchOptions{FieldManager: fieldManager, Force: new(true), FieldValidation: "Strict"}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err = res.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, opts)
	problems := c.warn.take()
	if err != nil {
		problems = append(problems, err.Error())
	}
	return problems
}

// resource is where obj's kind is served, in obj's namespace ("default"
// when it has none, as kubectl would use) if the kind is namespaced.
func (c *cluster) resource(obj *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := obj.GroupVersionKind()
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, err
	}
	if m.Scope.Name() != meta.RESTScopeNameNamespace {
		return c.dyn.Resource(m.Resource), nil
	}
	ns := obj.GetNamespace()
	if ns == "" {
		ns = "default"
	}
	return c.dyn.Resource(m.Resource).Namespace(ns), nil
}

// createNamespaces applies the rendered Namespaces for real and creates
// the other namespaces the objects are in.
func (c *cluster) createNamespaces(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	rendered := map[string]bool{}
	for _, o := range objs {
		if o.GetKind() == "Namespace" && o.GetAPIVersion() == "v1" {
			rendered[o.GetName()] = true
			if problems := c.apply(t, o, false); len(problems) > 0 {
				t.Fatalf("namespace %s:%s", o.GetName(), joinLines(problems))
			}
		}
	}
	for _, o := range objs {
		ns := o.GetNamespace()
		if ns == "" || rendered[ns] {
			continue
		}
		bare := &unstructured.Unstructured{}
		bare.SetAPIVersion("v1")
		bare.SetKind("Namespace")
		bare.SetName(ns)
		if problems := c.apply(t, bare, false); len(problems) > 0 {
			t.Fatalf("namespace %s:%s", ns, joinLines(problems))
		}
	}
}

// installCRDs applies crdFiles for real and waits until the API server
// serves every kind they define.
func (c *cluster) installCRDs(t *testing.T) {
	t.Helper()
	var served []schema.GroupVersionKind
	for _, f := range crdFiles {
		version := f.version
		if version == "" {
			version = dependencyVersion(t, f.module)
		}
		path := filepath.Join(moduleDir(t, f.module, version), f.path)
		docs, err := splitYAML(readFile(t, path))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for _, doc := range docs {
			crd := decodeUnstructured(t, path, doc)
			if crd == nil {
				continue
			}
			if crd.GetKind() != "CustomResourceDefinition" {
				t.Fatalf("%s: a %s among the CRDs", path, crd.GetKind())
			}
			if problems := c.apply(t, crd, false); len(problems) > 0 {
				t.Fatalf("CRD %s from %s:%s", crd.GetName(), path, joinLines(problems))
			}
			served = append(served, crdKinds(crd)...)
		}
	}
	c.waitServed(t, served)
}

// crdKinds returns the kinds a CRD serves, one per served version.
func crdKinds(crd *unstructured.Unstructured) []schema.GroupVersionKind {
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	kind, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "kind")
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	var out []schema.GroupVersionKind
	for _, v := range versions {
		m, _ := v.(map[string]any)
		if name, _ := m["name"].(string); m["served"] == true {
			out = append(out, schema.GroupVersionKind{Group: group, Version: name, Kind: kind})
		}
	}
	return out
}

// waitServed waits until discovery lists every kind (a CRD is served
// shortly after it is created, once its names are accepted).
func (c *cluster) waitServed(t *testing.T, kinds []schema.GroupVersionKind) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		c.mapper.Reset()
		var missing []string
		for _, k := range kinds {
			if _, err := c.mapper.RESTMapping(k.GroupKind(), k.Version); err != nil {
				missing = append(missing, k.String())
			}
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API server does not serve %v", missing)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// renderUnstructured renders dir and decodes each document as is.
func renderUnstructured(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	docs, err := splitYAML(render(t, dir))
	if err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, doc := range docs {
		if o := decodeUnstructured(t, dir, doc); o != nil {
			out = append(out, o)
		}
	}
	return out
}

// decodeUnstructured decodes one YAML document, nil when it is empty.
func decodeUnstructured(t *testing.T, source string, doc []byte) *unstructured.Unstructured {
	t.Helper()
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		t.Fatalf("%s: %v", source, err)
	}
	if s := strings.TrimSpace(string(j)); s == "null" || s == "{}" {
		return nil
	}
	o := &unstructured.Unstructured{}
	if err := o.UnmarshalJSON(j); err != nil {
		t.Fatalf("%s: %v", source, err)
	}
	return o
}

// dependencyVersion is the version of module in this module's build list
// (test binaries carry no dependency versions in their build information).
func dependencyVersion(t *testing.T, module string) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", module).Output()
	version := strings.TrimSpace(string(out))
	if err != nil || version == "" {
		t.Fatalf("go list -m %s: %v", module, err)
	}
	return version
}

// moduleDir downloads module@version through the Go module proxy (a no-op
// when the module cache has it) and returns its directory.
func moduleDir(t *testing.T, module, version string) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", module+"@"+version)
	cmd.Dir = t.TempDir() // outside this module: its go.mod and go.sum stay as they are
	out, err := cmd.Output()
	var res struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &res); jerr != nil || res.Dir == "" {
		t.Fatalf("go mod download %s@%s: %v %s %s", module, version, err, res.Error, out)
	}
	return res.Dir
}
