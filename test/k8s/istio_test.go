package k8s

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	securityapi "istio.io/api/security/v1beta1"
	istionetworking "istio.io/client-go/pkg/apis/networking/v1alpha3"
	istiosecurity "istio.io/client-go/pkg/apis/security/v1"
	corev1 "k8s.io/api/core/v1"
)

const (
	istioRootNamespace = "istio-system"
	ratelimitFilter    = "extauthz-ratelimit"
	idempotencyFilter  = "extauthz-idempotency"
)

// target is where the proxies reach extauthz, derived from the rendered
// base Service rather than written down again.
type target struct {
	FQDN    string // extauthz.extauthz.svc.cluster.local
	Port    int32  // the Service's gRPC port
	Cluster string // Istio's outbound cluster name for it
}

func serviceTarget(t *testing.T) target {
	t.Helper()
	svc := named[*corev1.Service](t, renderObjects(t, "k8s/base"), appName)
	for _, p := range svc.Spec.Ports {
		if p.Name == grpcPortName {
			fqdn := fmt.Sprintf("%s.%s.svc.cluster.local", svc.Name, svc.Namespace)
			return target{FQDN: fqdn, Port: p.Port, Cluster: fmt.Sprintf("outbound|%d||%s", p.Port, fqdn)}
		}
	}
	t.Fatal("the extauthz Service has no grpc port")
	return target{}
}

// meshConfig strictly decodes k8s/istio/meshconfig.yaml (Helm values whose
// only key is meshConfig) into Istio's MeshConfig.
func meshConfig(t *testing.T) *meshv1alpha1.MeshConfig {
	t.Helper()
	j, err := strictJSON(readFile(t, filepath.Join(repoRoot(t), meshConfigFile)))
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		MeshConfig json.RawMessage `json:"meshConfig"`
	}
	if err := decodeStrict(j, &values); err != nil {
		t.Fatalf("%s: %v", meshConfigFile, err)
	}
	var mc meshv1alpha1.MeshConfig
	if err := protojson.Unmarshal(values.MeshConfig, &mc); err != nil {
		t.Fatalf("%s: meshConfig: %v", meshConfigFile, err)
	}
	return &mc
}

// TestMeshConfigProvider: the ext_authz provider points at the Service's
// gRPC port and sends the body as bytes (binary-safe fingerprints).
func TestMeshConfigProvider(t *testing.T) {
	t.Parallel()
	want := serviceTarget(t)
	providers := meshConfig(t).GetExtensionProviders()
	if len(providers) != 1 {
		t.Fatalf("%d extension providers, want 1", len(providers))
	}
	g := providers[0].GetEnvoyExtAuthzGrpc()
	switch {
	case g == nil:
		t.Fatal("the provider is not envoyExtAuthzGrpc")
	case g.GetService() != want.FQDN || g.GetPort() != uint32(want.Port):
		t.Errorf("provider targets %s:%d, the Service is %s:%d", g.GetService(), g.GetPort(), want.FQDN, want.Port)
	case g.GetTimeout() == nil:
		t.Error("provider has no timeout")
	case !g.GetIncludeRequestBodyInCheck().GetPackAsBytes():
		t.Error("includeRequestBodyInCheck.packAsBytes must be true")
	case !g.GetClearRouteCache():
		t.Error("clearRouteCache must be true: a request marked for replay is re-routed to extauthz's replay endpoint")
	}
}

// istioVariant is one way to enable extauthz in the mesh.
type istioVariant struct {
	dir       string
	namespace string // where the resources land
	selective bool   // ext_authz and ratelimit select workloads by label
}

var istioVariants = []istioVariant{
	{dir: "k8s/istio/base", namespace: istioRootNamespace, selective: true},
	{dir: "k8s/istio/namespace", namespace: "my-app"},
	{dir: "k8s/istio/mesh", namespace: istioRootNamespace},
}

// TestIstioRenders renders each variant, strictly decodes the Istio
// resources (spec included) and checks how they fit together.
func TestIstioRenders(t *testing.T) {
	t.Parallel()
	tgt := serviceTarget(t)
	providers := map[string]bool{}
	for _, p := range meshConfig(t).GetExtensionProviders() {
		providers[p.GetName()] = true
	}
	for _, v := range istioVariants {
		t.Run(filepath.Base(v.dir), func(t *testing.T) {
			t.Parallel()
			objs := renderObjects(t, v.dir)
			if len(objs) != 4 {
				t.Errorf("%d objects, want an AuthorizationPolicy and three EnvoyFilters", len(objs))
			}
			for _, o := range objs {
				if ns := o.Obj.(interface{ GetNamespace() string }).GetNamespace(); ns != v.namespace {
					t.Errorf("%s in namespace %q, want %q", o, ns, v.namespace)
				}
			}
			ap := named[*istiosecurity.AuthorizationPolicy](t, objs, appName)
			checkAuthorizationPolicy(t, ap, providers)
			rl := named[*istionetworking.EnvoyFilter](t, objs, ratelimitFilter)
			idem := named[*istionetworking.EnvoyFilter](t, objs, idempotencyFilter)
			replay := named[*istionetworking.EnvoyFilter](t, objs, replayFilter)
			checkSelection(t, v, ap, rl, idem)
			checkSelection(t, v, ap, replay, idem)
			for _, ef := range []*istionetworking.EnvoyFilter{rl, idem} {
				checkEnvoyFilter(t, ef, tgt)
			}
			checkReplayFilter(t, replay, replayCluster(t))
			checkFilterOrder(t, rl, idem)
		})
	}
}

func checkAuthorizationPolicy(t *testing.T, ap *istiosecurity.AuthorizationPolicy, providers map[string]bool) {
	t.Helper()
	spec := &ap.Spec
	if spec.GetAction() != securityapi.AuthorizationPolicy_CUSTOM {
		t.Errorf("AuthorizationPolicy action %s, want CUSTOM", spec.GetAction())
	}
	if name := spec.GetProvider().GetName(); !providers[name] {
		t.Errorf("AuthorizationPolicy provider %q is not an extensionProvider of %s", name, meshConfigFile)
	}
	if len(spec.GetRules()) == 0 {
		t.Error("a CUSTOM AuthorizationPolicy without rules matches nothing")
	}
}

// checkSelection: in the label-selective variant, ext_authz and rl (the
// ratelimit filter, placed relative to ext_authz, or the replay route,
// needed wherever ext_authz issues tickets) select the same workloads;
// elsewhere they select every workload. ext_proc always stays opt-in.
func checkSelection(t *testing.T, v istioVariant, ap *istiosecurity.AuthorizationPolicy, rl, idem *istionetworking.EnvoyFilter) {
	t.Helper()
	apLabels := ap.Spec.GetSelector().GetMatchLabels()
	rlLabels := rl.Spec.GetWorkloadSelector().GetLabels()
	if v.selective {
		if len(apLabels) == 0 || !maps.Equal(apLabels, rlLabels) {
			t.Errorf("AuthorizationPolicy selects %v but the ratelimit EnvoyFilter %v", apLabels, rlLabels)
		}
	} else if len(apLabels) != 0 || len(rlLabels) != 0 {
		t.Errorf("%s should select every workload, selectors %v / %v", v.dir, apLabels, rlLabels)
	}
	if len(idem.Spec.GetWorkloadSelector().GetLabels()) == 0 {
		t.Error("the ext_proc EnvoyFilter must stay opt-in by label")
	}
}
