package k8s

import (
	"fmt"
	"slices"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	networkingapi "istio.io/api/networking/v1alpha3"
	istionetworking "istio.io/client-go/pkg/apis/networking/v1alpha3"
)

// Envoy's names for the filters we place.
const (
	extAuthzName  = "envoy.filters.http.ext_authz"
	ratelimitName = "envoy.filters.http.ratelimit"
	extProcName   = "envoy.filters.http.ext_proc"
	routerName    = "envoy.filters.http.router"
)

// patchTarget returns an empty Envoy message of the type an EnvoyFilter
// patch with this applyTo carries.
func patchTarget(applyTo networkingapi.EnvoyFilter_ApplyTo) (proto.Message, error) {
	switch applyTo {
	case networkingapi.EnvoyFilter_HTTP_FILTER:
		return &hcmv3.HttpFilter{}, nil
	case networkingapi.EnvoyFilter_VIRTUAL_HOST:
		return &routev3.VirtualHost{}, nil
	case networkingapi.EnvoyFilter_HTTP_ROUTE:
		return &routev3.Route{}, nil
	case networkingapi.EnvoyFilter_ROUTE_CONFIGURATION:
		return &routev3.RouteConfiguration{}, nil
	case networkingapi.EnvoyFilter_CLUSTER:
		return &clusterv3.Cluster{}, nil
	case networkingapi.EnvoyFilter_NETWORK_FILTER:
		return &listenerv3.Filter{}, nil
	case networkingapi.EnvoyFilter_LISTENER:
		return &listenerv3.Listener{}, nil
	}
	return nil, fmt.Errorf("applyTo %s: teach the test its Envoy type", applyTo)
}

// decodePatch decodes a patch value, a Struct that Istio accepts whatever
// it holds, into the real Envoy type with protojson: an unknown field, a
// wrong enum or an unregistered @type fails. typed_config is resolved
// through the go-control-plane types linked into this test.
func decodePatch(cp *networkingapi.EnvoyFilter_EnvoyConfigObjectPatch) (proto.Message, error) {
	m, err := patchTarget(cp.GetApplyTo())
	if err != nil {
		return nil, err
	}
	j, err := protojson.Marshal(cp.GetPatch().GetValue())
	if err != nil {
		return nil, err
	}
	if err := protojson.Unmarshal(j, m); err != nil {
		return nil, fmt.Errorf("%s value: %w", cp.GetApplyTo(), err)
	}
	return m, nil
}

type validator interface{ ValidateAll() error }

// checkEnvoyFilter decodes every patch, validates the Envoy constraints
// (protoc-gen-validate rules of go-control-plane) of what is complete, and
// checks each filter's settings.
func checkEnvoyFilter(t *testing.T, ef *istionetworking.EnvoyFilter, tgt target) {
	t.Helper()
	for i, cp := range ef.Spec.GetConfigPatches() {
		where := fmt.Sprintf("%s patch %d", ef.Name, i)
		if cp.GetMatch().GetContext() != networkingapi.EnvoyFilter_SIDECAR_INBOUND {
			t.Errorf("%s: context %s, want SIDECAR_INBOUND", where, cp.GetMatch().GetContext())
		}
		m, err := decodePatch(cp)
		if err != nil {
			t.Errorf("%s: %v", where, err)
			continue
		}
		switch v := m.(type) {
		case *hcmv3.HttpFilter:
			checkHTTPFilter(t, where, v, tgt)
		case *routev3.VirtualHost:
			checkRateLimits(t, where, v.GetRateLimits())
		default:
			t.Errorf("%s: unexpected %T patch", where, v)
		}
	}
}

func checkHTTPFilter(t *testing.T, where string, f *hcmv3.HttpFilter, tgt target) {
	t.Helper()
	if err := f.ValidateAll(); err != nil {
		t.Errorf("%s: %v", where, err)
	}
	cfg, err := f.GetTypedConfig().UnmarshalNew()
	if err != nil {
		t.Fatalf("%s: typed_config: %v", where, err)
	}
	if v, ok := cfg.(validator); ok {
		if err := v.ValidateAll(); err != nil {
			t.Errorf("%s: %v", where, err)
		}
	}
	switch c := cfg.(type) {
	case *ratelimitv3.RateLimit:
		checkRateLimitFilter(t, where, f.GetName(), c, tgt)
	case *extprocv3.ExternalProcessor:
		checkExtProcFilter(t, where, f.GetName(), c, tgt)
	default:
		t.Errorf("%s: unexpected filter config %T", where, c)
	}
}

func checkRateLimitFilter(t *testing.T, where, name string, c *ratelimitv3.RateLimit, tgt target) {
	t.Helper()
	g := c.GetRateLimitService().GetGrpcService().GetEnvoyGrpc()
	switch {
	case name != ratelimitName:
		t.Errorf("%s: filter name %q, want %q", where, name, ratelimitName)
	case g.GetClusterName() != tgt.Cluster || g.GetAuthority() != tgt.FQDN:
		t.Errorf("%s: RLS cluster %q authority %q, want %q and %q", where, g.GetClusterName(), g.GetAuthority(), tgt.Cluster, tgt.FQDN)
	case c.GetTimeout() == nil:
		t.Errorf("%s: set the RLS timeout deliberately (Envoy's default is 20ms)", where)
	}
	if !slices.Contains(policyDomains(t), c.GetDomain()) {
		t.Errorf("%s: domain %q is not defined in %s", where, c.GetDomain(), policyDir)
	}
}

func checkExtProcFilter(t *testing.T, where, name string, c *extprocv3.ExternalProcessor, tgt target) {
	t.Helper()
	g := c.GetGrpcService().GetEnvoyGrpc()
	mode := c.GetProcessingMode()
	switch {
	case name != extProcName:
		t.Errorf("%s: filter name %q, want %q", where, name, extProcName)
	case g.GetClusterName() != tgt.Cluster || g.GetAuthority() != tgt.FQDN:
		t.Errorf("%s: ext_proc cluster %q authority %q, want %q and %q", where, g.GetClusterName(), g.GetAuthority(), tgt.Cluster, tgt.FQDN)
	case mode.GetResponseBodyMode() != extprocv3.ProcessingMode_BUFFERED:
		t.Errorf("%s: the response body must be BUFFERED to be stored whole", where)
	case !slices.Contains(c.GetMetadataOptions().GetForwardingNamespaces().GetUntyped(), extAuthzName):
		t.Errorf("%s: ext_authz's dynamic metadata (the lease) is not forwarded", where)
	case !slices.Contains(c.GetResponseAttributes(), "response.code_details"):
		t.Errorf("%s: response.code_details is needed to tell upstream replies from local ones", where)
	case c.GetMessageTimeout() == nil:
		t.Errorf("%s: set message_timeout deliberately", where)
	}
}

// checkRateLimits: each route rate_limits entry is valid for Envoy and
// yields a descriptor the policy's domain has a limit for.
func checkRateLimits(t *testing.T, where string, rls []*routev3.RateLimit) {
	t.Helper()
	if len(rls) == 0 {
		t.Errorf("%s: no rate_limits", where)
	}
	tree := policyDescriptors(t)
	tenantKey := configVars(t)["EXTAUTHZ_RLS_TENANT_KEY"].Default
	for i, rl := range rls {
		if err := rl.ValidateAll(); err != nil {
			t.Errorf("%s rate_limits[%d]: %v", where, i, err)
			continue
		}
		entries, err := descriptorEntries(rl)
		if err != nil {
			t.Errorf("%s rate_limits[%d]: %v", where, i, err)
			continue
		}
		entries = tree.stripTenant(entries, tenantKey)
		if len(entries) == 0 || !tree.limits(entries) {
			t.Errorf("%s rate_limits[%d]: descriptor %v matches no limit of the policy", where, i, entries)
		}
	}
}

// checkFilterOrder applies the HTTP_FILTER patches to the inbound chain
// Istio builds for a workload with a CUSTOM policy, and checks the result is
// ratelimit → ext_authz → ext_proc → router: a 429 comes before a lease is
// taken, and ext_proc sees only admitted requests.
func checkFilterOrder(t *testing.T, efs ...*istionetworking.EnvoyFilter) {
	t.Helper()
	chain := []string{"istio.metadata_exchange", extAuthzName, "envoy.filters.http.rbac", "istio.stats", routerName}
	for _, ef := range efs {
		for _, cp := range ef.Spec.GetConfigPatches() {
			if cp.GetApplyTo() != networkingapi.EnvoyFilter_HTTP_FILTER {
				continue
			}
			var err error
			chain, err = applyFilterPatch(chain, cp)
			if err != nil {
				t.Errorf("%s: %v", ef.Name, err)
			}
		}
	}
	want := []string{ratelimitName, extAuthzName, extProcName, routerName}
	var got []string
	for _, f := range chain {
		if slices.Contains(want, f) {
			got = append(got, f)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("filter order %v, want %v (full chain %v)", got, want, chain)
	}
}

func applyFilterPatch(chain []string, cp *networkingapi.EnvoyFilter_EnvoyConfigObjectPatch) ([]string, error) {
	name := cp.GetPatch().GetValue().GetFields()["name"].GetStringValue()
	anchor := cp.GetMatch().GetListener().GetFilterChain().GetFilter().GetSubFilter().GetName()
	i := slices.Index(chain, anchor)
	op := cp.GetPatch().GetOperation()
	switch {
	case op == networkingapi.EnvoyFilter_Patch_INSERT_FIRST:
		return slices.Insert(chain, 0, name), nil
	case anchor == "" || op == networkingapi.EnvoyFilter_Patch_ADD:
		return nil, fmt.Errorf("filter %s: anchor it to a subFilter; ADD would place it after the router", name)
	case i < 0:
		return chain, fmt.Errorf("filter %s: subFilter %s is not in the chain", name, anchor)
	case op == networkingapi.EnvoyFilter_Patch_INSERT_BEFORE:
		return slices.Insert(chain, i, name), nil
	case op == networkingapi.EnvoyFilter_Patch_INSERT_AFTER:
		return slices.Insert(chain, i+1, name), nil
	}
	return chain, fmt.Errorf("filter %s: operation %s not modelled", name, op)
}
