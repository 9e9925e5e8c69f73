package k8s

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/http/early_header_mutation/header_mutation/v3"
	"google.golang.org/protobuf/proto"
	networkingapi "istio.io/api/networking/v1alpha3"
	istionetworking "istio.io/client-go/pkg/apis/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"
)

// replayFilter routes replay tickets in the mesh (k8s/istio/base).
const replayFilter = "extauthz-replay"

// hcmName is the network filter the replay filter's MERGE patches.
const hcmName = "envoy.filters.network.http_connection_manager"

// replayCluster is Istio's outbound cluster of the extauthz Service's
// replay port, as rendered with object storage (production-s3).
func replayCluster(t *testing.T) string {
	t.Helper()
	svc := named[*corev1.Service](t, renderObjects(t, "k8s/overlays/production-s3"), appName)
	for _, p := range svc.Spec.Ports {
		if p.Name == replayPortName {
			return fmt.Sprintf("outbound|%d||%s.%s.svc.cluster.local", p.Port, svc.Name, svc.Namespace)
		}
	}
	t.Fatalf("the production-s3 Service has no %s port", replayPortName)
	return ""
}

// referenceReplay is what envoy/sidecar.yaml does for replays: its replay
// route (the one to cluster extauthz_replay) and the headers its early
// header mutation removes. The mesh must do the same.
func referenceReplay(t *testing.T) (*routev3.Route, []string) {
	t.Helper()
	var route *routev3.Route
	var removed []string
	for _, l := range envoyBootstrap(t, "sidecar.yaml").GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, nf := range fc.GetFilters() {
				var hcm hcmv3.HttpConnectionManager
				if nf.GetTypedConfig().UnmarshalTo(&hcm) != nil {
					continue
				}
				removed = append(removed, earlyRemovals(t, &hcm)...)
				for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
					for _, r := range vh.GetRoutes() {
						if r.GetRoute().GetCluster() == "extauthz_replay" {
							route = r
						}
					}
				}
			}
		}
	}
	if route == nil || len(removed) == 0 {
		t.Fatal("envoy/sidecar.yaml: no replay route or no early header removal")
	}
	return route, removed
}

// earlyRemovals lists the headers an HCM's early header mutations remove.
func earlyRemovals(t *testing.T, hcm *hcmv3.HttpConnectionManager) []string {
	t.Helper()
	var out []string
	for _, ext := range hcm.GetEarlyHeaderMutationExtensions() {
		var hm headermutationv3.HeaderMutation
		if err := ext.GetTypedConfig().UnmarshalTo(&hm); err != nil {
			t.Fatalf("early header mutation %s: %v", ext.GetName(), err)
		}
		if err := hm.ValidateAll(); err != nil {
			t.Errorf("early header mutation %s: %v", ext.GetName(), err)
		}
		for _, m := range hm.GetMutations() {
			if r := m.GetRemove(); r != "" {
				out = append(out, r)
			}
		}
	}
	return out
}

// checkReplayFilter: the mesh strips client copies of the same headers as
// envoy/sidecar.yaml, before routing, and puts first on every inbound
// virtual host a route like sidecar.yaml's replay route (same header
// match, ext_authz and ext_proc disabled, a timeout) to the replay port's
// outbound cluster.
func checkReplayFilter(t *testing.T, ef *istionetworking.EnvoyFilter, cluster string) {
	t.Helper()
	ref, refRemoved := referenceReplay(t)
	var sawStrip, sawRoute bool
	for i, cp := range ef.Spec.GetConfigPatches() {
		where := fmt.Sprintf("%s patch %d", ef.Name, i)
		m, err := decodePatch(cp)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		switch v := m.(type) {
		case *routev3.Route:
			sawRoute = true
			checkReplayRoute(t, where, cp, v, ref, cluster)
		default:
			hcm := mergedHCM(t, where, cp)
			sawStrip = true
			if got := earlyRemovals(t, hcm); !slices.Equal(sorted(got), sorted(refRemoved)) {
				t.Errorf("%s: removes %v before routing, envoy/sidecar.yaml %v", where, got, refRemoved)
			}
		}
	}
	if !sawStrip || !sawRoute {
		t.Errorf("%s: strip patch %v, route patch %v; want both", ef.Name, sawStrip, sawRoute)
	}
}

func sorted(s []string) []string { return slices.Sorted(slices.Values(s)) }

// mergedHCM returns the HttpConnectionManager fields a NETWORK_FILTER
// MERGE patch on the inbound HCM adds, failing for any other patch.
func mergedHCM(t *testing.T, where string, cp *networkingapi.EnvoyFilter_EnvoyConfigObjectPatch) *hcmv3.HttpConnectionManager {
	t.Helper()
	name := cp.GetMatch().GetListener().GetFilterChain().GetFilter().GetName()
	if cp.GetApplyTo() != networkingapi.EnvoyFilter_NETWORK_FILTER || cp.GetPatch().GetOperation() != networkingapi.EnvoyFilter_Patch_MERGE || name != hcmName {
		t.Fatalf("%s: %s %s on %q, want a MERGE of the %s", where, cp.GetPatch().GetOperation(), cp.GetApplyTo(), name, hcmName)
	}
	f, err := decodePatch(cp)
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	var hcm hcmv3.HttpConnectionManager
	if err := f.(*listenerv3.Filter).GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatalf("%s: typed_config: %v", where, err)
	}
	return &hcm
}

func checkReplayRoute(t *testing.T, where string, cp *networkingapi.EnvoyFilter_EnvoyConfigObjectPatch, r, ref *routev3.Route, cluster string) {
	t.Helper()
	if err := r.ValidateAll(); err != nil {
		t.Errorf("%s: %v", where, err)
	}
	if cp.GetPatch().GetOperation() != networkingapi.EnvoyFilter_Patch_INSERT_FIRST || cp.GetMatch().GetRouteConfiguration() != nil {
		t.Errorf("%s: %s with match %v; want INSERT_FIRST on every inbound virtual host", where, cp.GetPatch().GetOperation(), cp.GetMatch().GetRouteConfiguration())
	}
	if !proto.Equal(r.GetMatch(), ref.GetMatch()) {
		t.Errorf("%s: match %v, envoy/sidecar.yaml's replay route %v", where, r.GetMatch(), ref.GetMatch())
	}
	if got := r.GetRoute().GetCluster(); got != cluster {
		t.Errorf("%s: cluster %q, want the replay port's %q", where, got, cluster)
	}
	if r.GetRoute().GetTimeout() == nil || !proto.Equal(r.GetRoute().GetTimeout(), ref.GetRoute().GetTimeout()) {
		t.Errorf("%s: timeout %v, envoy/sidecar.yaml %v", where, r.GetRoute().GetTimeout(), ref.GetRoute().GetTimeout())
	}
	per := r.GetTypedPerFilterConfig()
	if !slices.Equal(slices.Sorted(maps.Keys(per)), []string{extAuthzName, extProcName}) {
		t.Errorf("%s: per-filter configs %v, want ext_authz and ext_proc", where, slices.Sorted(maps.Keys(per)))
	}
	var az extauthzv3.ExtAuthzPerRoute
	var ep extprocv3.ExtProcPerRoute
	if per[extAuthzName].UnmarshalTo(&az) != nil || !az.GetDisabled() || per[extProcName].UnmarshalTo(&ep) != nil || !ep.GetDisabled() {
		t.Errorf("%s: ext_authz and ext_proc must be disabled on the replay route", where)
	}
}
