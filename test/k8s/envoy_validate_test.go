package k8s

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	networkingapi "istio.io/api/networking/v1alpha3"
	istionetworking "istio.io/client-go/pkg/apis/networking/v1alpha3"
)

// envoyBin finds Envoy as the project's other tests do: ENVOY_BIN, else
// envoy on PATH. Missing, the test fails under CI=true and skips otherwise.
func envoyBin(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("ENVOY_BIN"); bin != "" {
		return bin
	}
	bin, err := exec.LookPath("envoy")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("envoy not found: set ENVOY_BIN or put envoy on PATH")
		}
		t.Skip("envoy not found (set ENVOY_BIN or put envoy on PATH)")
	}
	return bin
}

// TestEnvoyAcceptsSidecarConfig builds the inbound HTTP chain a selected
// sidecar ends up with: Istio's ext_authz filter for the mesh config's
// provider, the EnvoyFilters' ratelimit and ext_proc filters, route
// rate_limits, the replay route (first) and the early header mutation that
// strips client copies of the replay headers, and asks a real Envoy
// (`--mode validate`) to load it. The typed decode catches misspelt
// fields; this catches what only Envoy checks.
func TestEnvoyAcceptsSidecarConfig(t *testing.T) {
	t.Parallel()
	bin := envoyBin(t)
	sc := renderSidecar(t, serviceTarget(t), "app")
	path := filepath.Join(t.TempDir(), "envoy.json")
	j, err := protojson.Marshal(sc.bootstrap(t, sidecarPorts{listen: 15006, extauthz: int(sc.tgt.Port), app: 8080, replay: 9002}))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, j, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "--mode", "validate", "-c", path, "--log-level", "warn").CombinedOutput()
	if err != nil {
		t.Fatalf("envoy --mode validate rejects the sidecar chain: %v\n%s", err, out)
	}
}

// sidecar is the inbound HTTP connection manager of a selected sidecar,
// built from the Istio manifests as istiod would.
type sidecar struct {
	tgt      target
	app      string // the workload's cluster
	hcm      *hcmv3.HttpConnectionManager
	clusters []string // clusters its routes name besides the app's
}

// renderSidecar applies every EnvoyFilter patch of k8s/istio/base to the
// chain Istio builds for an inbound port whose workload is the cluster
// app: HTTP_FILTER inserts, VIRTUAL_HOST merges, HTTP_ROUTE INSERT_FIRST
// and the HCM's NETWORK_FILTER MERGE.
func renderSidecar(t *testing.T, tgt target, app string) *sidecar {
	t.Helper()
	filters := []*hcmv3.HttpFilter{istioExtAuthz(t, tgt)}
	vhost := &routev3.VirtualHost{
		Name: "inbound|http|8080", Domains: []string{"*"},
		Routes: []*routev3.Route{{
			Name:   "default",
			Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: app}}},
		}},
	}
	hcm := &hcmv3.HttpConnectionManager{StatPrefix: "inbound_0.0.0.0_8080"}
	sc := &sidecar{tgt: tgt, app: app, hcm: hcm}
	for _, ef := range only[*istionetworking.EnvoyFilter](renderObjects(t, "k8s/istio/base")) {
		for _, cp := range ef.Spec.GetConfigPatches() {
			m, err := decodePatch(cp)
			if err != nil {
				t.Fatalf("%s: %v", ef.Name, err)
			}
			switch v := m.(type) {
			case *hcmv3.HttpFilter:
				filters = insertFilter(t, filters, cp, v)
			case *routev3.VirtualHost:
				proto.Merge(vhost, v) // the MERGE operation
			case *routev3.Route:
				if cp.GetPatch().GetOperation() != networkingapi.EnvoyFilter_Patch_INSERT_FIRST {
					t.Fatalf("%s: route patch %s not modelled", ef.Name, cp.GetPatch().GetOperation())
				}
				vhost.Routes = append([]*routev3.Route{v}, vhost.Routes...)
				sc.clusters = append(sc.clusters, v.GetRoute().GetCluster())
			case *listenerv3.Filter:
				proto.Merge(hcm, mergedHCM(t, ef.Name, cp)) // MERGE: repeated fields append
			}
		}
	}
	filters = append(filters, &hcmv3.HttpFilter{Name: routerName, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, &routerv3.Router{})}})
	hcm.HttpFilters = filters
	hcm.RouteSpecifier = &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{Name: "inbound|8080||", VirtualHosts: []*routev3.VirtualHost{vhost}}}
	return sc
}

// insertFilter places an HTTP_FILTER patch relative to its subFilter.
func insertFilter(t *testing.T, chain []*hcmv3.HttpFilter, cp *networkingapi.EnvoyFilter_EnvoyConfigObjectPatch, f *hcmv3.HttpFilter) []*hcmv3.HttpFilter {
	t.Helper()
	names := make([]string, len(chain))
	for i, c := range chain {
		names[i] = c.GetName()
	}
	names = append(names, routerName) // the router is appended last
	placed, err := applyFilterPatch(names, cp)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*hcmv3.HttpFilter{f.GetName(): f}
	for _, c := range chain {
		byName[c.GetName()] = c
	}
	var out []*hcmv3.HttpFilter
	for _, n := range placed {
		if n != routerName {
			out = append(out, byName[n])
		}
	}
	return out
}

// istioExtAuthz is the ext_authz filter istiod builds for the mesh
// config's envoyExtAuthzGrpc provider.
func istioExtAuthz(t *testing.T, tgt target) *hcmv3.HttpFilter {
	t.Helper()
	p := meshConfig(t).GetExtensionProviders()[0].GetEnvoyExtAuthzGrpc()
	status, err := strconv.Atoi(p.GetStatusOnError())
	if err != nil {
		t.Fatalf("statusOnError %q: %v", p.GetStatusOnError(), err)
	}
	body := p.GetIncludeRequestBodyInCheck()
	cfg := &extauthzv3.ExtAuthz{
		TransportApiVersion: corev3.ApiVersion_V3,
		Services: &extauthzv3.ExtAuthz_GrpcService{GrpcService: &corev3.GrpcService{
			TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: tgt.Cluster, Authority: tgt.FQDN}},
			Timeout:         p.GetTimeout(),
		}},
		FailureModeAllow: p.GetFailOpen(),
		StatusOnError:    &typev3.HttpStatus{Code: typev3.StatusCode(status)},
		ClearRouteCache:  p.GetClearRouteCache(),
		WithRequestBody: &extauthzv3.BufferSettings{
			MaxRequestBytes: uint32(body.GetMaxRequestBytes()), AllowPartialMessage: body.GetAllowPartialMessage(), PackAsBytes: body.GetPackAsBytes(),
		},
	}
	return &hcmv3.HttpFilter{Name: extAuthzName, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, cfg)}}
}

// sidecarPorts are the loopback ports of a rendered sidecar: its inbound
// listener, extauthz's gRPC port, the app and the replay endpoint.
type sidecarPorts struct{ listen, extauthz, app, replay int }

// bootstrap is a whole Envoy config around the sidecar's HCM: the inbound
// listener, the extauthz gRPC cluster (HTTP/2), the app, and every other
// cluster its routes name (the replay port's) at the replay port.
func (sc *sidecar) bootstrap(t *testing.T, p sidecarPorts) *bootstrapv3.Bootstrap {
	t.Helper()
	h2 := &upstreamhttpv3.HttpProtocolOptions{UpstreamProtocolOptions: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_{
		ExplicitHttpConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}},
		}}}
	extauthz := staticCluster(sc.tgt.Cluster, p.extauthz)
	extauthz.TypedExtensionProtocolOptions = map[string]*anypb.Any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": mustAny(t, h2)}
	clusters := []*clusterv3.Cluster{extauthz, staticCluster(sc.app, p.app)}
	for _, name := range sc.clusters {
		clusters = append(clusters, staticCluster(name, p.replay))
	}
	return &bootstrapv3.Bootstrap{StaticResources: &bootstrapv3.Bootstrap_StaticResources{
		Listeners: []*listenerv3.Listener{{
			Name:    "virtualInbound",
			Address: socketAddress(p.listen),
			FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
				Name: "envoy.filters.network.http_connection_manager", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(t, sc.hcm)},
			}}}},
		}},
		Clusters: clusters,
	}}
}

func staticCluster(name string, port int) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		LoadAssignment: &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{
			LbEndpoints: []*endpointv3.LbEndpoint{{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: socketAddress(port)}}}},
		}}},
	}
}

func socketAddress(port int) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: "127.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(port)},
	}}}
}

func mustAny(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(fmt.Errorf("pack %T: %w", m, err))
	}
	return a
}
