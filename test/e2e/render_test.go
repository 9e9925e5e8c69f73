package e2e

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"
)

// renderSpec says what to substitute in an envoy/ configuration so that it
// runs on loopback in a test. Nothing else in the file changes, except that
// stripFilters (the latency baseline) keeps only the router.
type renderSpec struct {
	// adminPort replaces the admin port (the address becomes 127.0.0.1).
	adminPort int
	// listenerPorts maps each listener's name to its port; every listener
	// must be named here (the address becomes 127.0.0.1).
	listenerPorts map[string]int
	// endpoints maps each cluster's name to host:port endpoints that replace
	// its load_assignment; every cluster must be named here.
	endpoints map[string][]string
	// stripFilters drops every HTTP filter but the router: the same Envoy
	// without extauthz, for latency comparisons.
	stripFilters bool
	// keepFilters, with stripFilters, keeps these HTTP filters too (by
	// name), with their route-level configuration: one API alone.
	keepFilters []string
	// eds maps a cluster's name to an EDS file (path_config_source, watched
	// through its directory) that replaces its endpoints: the cluster
	// becomes type EDS, as Kubernetes endpoints reach Envoy through xDS.
	// Everything else of the cluster stays the file's.
	eds map[string]string
	// jwks is a JWKS file that becomes every jwt_authn provider's key set
	// (local_jwks, replacing the file's remote_jwks or local_jwks): the
	// tests sign their own tokens. Issuers, audiences and rules stay the
	// file's. A configuration with jwt_authn and no jwks is an error,
	// unless keepJWKS leaves its key sets as they are.
	jwks     string
	keepJWKS bool
	// otlp, when set (host:port of an OTLP/gRPC receiver), turns Envoy's
	// tracing on: every HTTP connection manager gets the OpenTelemetry
	// tracer with random_sampling 100, exporting through a static cluster
	// "otlp" added for it, and a runtime layer makes Envoy export each span
	// as it ends instead of in batches of 5 or every 5 s.
	otlp string
	// callDeadline, when set (an Envoy duration such as "10s"), replaces
	// every deadline of Envoy's calls to extauthz: the ratelimit filter's
	// timeout, ext_authz's grpc_service timeout and ext_proc's
	// message_timeout, per-route overrides included (stretchDeadlines).
	callDeadline string
}

var errRender = errors.New("render envoy config")

// renderEnvoy parses an Envoy YAML configuration and returns it with the
// substitutions of spec applied. It fails when the file has a listener or a
// cluster the spec does not name, so a new cluster added to envoy/ cannot
// silently point a test at a DNS name.
func renderEnvoy(src []byte, spec renderSpec) ([]byte, error) {
	var doc map[string]any
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, fmt.Errorf("%w: %v", errRender, err)
	}
	if err := setSocket(doc, spec.adminPort, "admin", "address", "socket_address"); err != nil {
		return nil, err
	}
	res, _ := doc["static_resources"].(map[string]any)
	if res == nil {
		return nil, fmt.Errorf("%w: no static_resources", errRender)
	}
	if err := renderListeners(res, spec); err != nil {
		return nil, err
	}
	if err := renderClusters(res, spec.endpoints, spec.eds); err != nil {
		return nil, err
	}
	if spec.otlp != "" {
		if err := addTracing(doc, res, spec.otlp); err != nil {
			return nil, err
		}
	}
	return yaml.Marshal(doc)
}

func renderListeners(res map[string]any, spec renderSpec) error {
	listeners, _ := res["listeners"].([]any)
	seen := 0
	for _, l := range listeners {
		lm, _ := l.(map[string]any)
		name, _ := lm["name"].(string)
		port, ok := spec.listenerPorts[name]
		if !ok {
			return fmt.Errorf("%w: listener %q has no port in the test", errRender, name)
		}
		if err := setSocket(lm, port, "address", "socket_address"); err != nil {
			return fmt.Errorf("listener %q: %w", name, err)
		}
		if !spec.keepJWKS {
			if err := eachHCM(lm, func(hcm map[string]any) error { return useTestJWKS(hcm, spec.jwks) }); err != nil {
				return fmt.Errorf("listener %q: %w", name, err)
			}
		}
		if spec.callDeadline != "" {
			_ = eachHCM(lm, func(hcm map[string]any) error { stretchDeadlines(hcm, spec.callDeadline); return nil })
		}
		if spec.stripFilters {
			if err := stripHTTPFilters(lm, spec.keepFilters); err != nil {
				return fmt.Errorf("listener %q: %w", name, err)
			}
		}
		seen++
	}
	if seen != len(spec.listenerPorts) {
		return fmt.Errorf("%w: %d listeners in the file, %d in the test", errRender, seen, len(spec.listenerPorts))
	}
	return nil
}

func renderClusters(res map[string]any, endpoints map[string][]string, eds map[string]string) error {
	clusters, _ := res["clusters"].([]any)
	seen := 0
	for _, c := range clusters {
		cm, _ := c.(map[string]any)
		name, _ := cm["name"].(string)
		if path, ok := eds[name]; ok {
			useEDS(cm, path)
			seen++
			continue
		}
		eps, ok := endpoints[name]
		if !ok {
			return fmt.Errorf("%w: cluster %q has no endpoints in the test", errRender, name)
		}
		la, err := loadAssignment(name, eps)
		if err != nil {
			return err
		}
		cm["load_assignment"] = la
		seen++
	}
	if seen != len(endpoints)+len(eds) {
		return fmt.Errorf("%w: %d clusters in the file, %d in the test", errRender, seen, len(endpoints))
	}
	return nil
}

func loadAssignment(cluster string, eps []string) (map[string]any, error) {
	var lbs []any
	for _, ep := range eps {
		host, portStr, err := net.SplitHostPort(ep)
		if err != nil {
			return nil, fmt.Errorf("%w: cluster %q: %v", errRender, cluster, err)
		}
		port, err := strconv.Atoi(portStr)
		if err != nil {
			return nil, fmt.Errorf("%w: cluster %q: port %q", errRender, cluster, portStr)
		}
		lbs = append(lbs, map[string]any{"endpoint": map[string]any{"address": map[string]any{
			"socket_address": map[string]any{"address": host, "port_value": port},
		}}})
	}
	return map[string]any{
		"cluster_name": cluster,
		"endpoints":    []any{map[string]any{"lb_endpoints": lbs}},
	}, nil
}

// useEDS turns a cluster into an EDS cluster reading path.
func useEDS(cluster map[string]any, path string) {
	delete(cluster, "load_assignment")
	delete(cluster, "dns_lookup_family")
	cluster["type"] = "EDS"
	cluster["eds_cluster_config"] = map[string]any{"eds_config": map[string]any{
		"resource_api_version": "V3",
		"path_config_source": map[string]any{
			"path":              path,
			"watched_directory": map[string]any{"path": filepath.Dir(path)},
		},
	}}
}

// edsFile is the content of an EDS file: cluster's endpoints eps.
func edsFile(cluster string, eps []string) ([]byte, error) {
	la, err := loadAssignment(cluster, eps)
	if err != nil {
		return nil, err
	}
	la["@type"] = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	return yaml.Marshal(map[string]any{"version_info": fmt.Sprint(time.Now().UnixNano()), "resources": []any{la}})
}

// setSocket sets 127.0.0.1:port on the socket_address found under path.
func setSocket(m map[string]any, port int, path ...string) error {
	cur := m
	for _, p := range path {
		next, _ := cur[p].(map[string]any)
		if next == nil {
			return fmt.Errorf("%w: no %v", errRender, path)
		}
		cur = next
	}
	cur["address"] = "127.0.0.1"
	cur["port_value"] = port
	return nil
}

// stripHTTPFilters keeps only envoy.filters.http.router (and the filters
// named in keep) in every HTTP connection manager of the listener, and
// drops the routes' per-filter configs and rate_limits with the filters
// they belong to.
func stripHTTPFilters(listener map[string]any, keep []string) error {
	kept := map[string]bool{"envoy.filters.http.router": true}
	for _, k := range keep {
		kept[k] = true
	}
	chains, _ := listener["filter_chains"].([]any)
	for _, ch := range chains {
		chm, _ := ch.(map[string]any)
		filters, _ := chm["filters"].([]any)
		for _, f := range filters {
			fm, _ := f.(map[string]any)
			hcm, _ := fm["typed_config"].(map[string]any)
			if hcm == nil || fm["name"] != "envoy.filters.network.http_connection_manager" {
				continue
			}
			var filters []any
			for _, hf := range asSlice(hcm["http_filters"]) {
				if m, _ := hf.(map[string]any); m != nil && kept[fmt.Sprint(m["name"])] {
					filters = append(filters, hf)
				}
			}
			if len(filters) != len(kept) {
				return fmt.Errorf("%w: %d of the filters %v", errRender, len(filters), keep)
			}
			hcm["http_filters"] = filters
			stripRouteFilterConfigs(hcm, kept)
		}
	}
	return nil
}

func stripRouteFilterConfigs(hcm map[string]any, kept map[string]bool) {
	rc, _ := hcm["route_config"].(map[string]any)
	for _, vh := range asSlice(rc["virtual_hosts"]) {
		vhm, _ := vh.(map[string]any)
		stripPerFilter(vhm, kept)
		for _, r := range asSlice(vhm["routes"]) {
			rm, _ := r.(map[string]any)
			stripPerFilter(rm, kept)
			if ra, _ := rm["route"].(map[string]any); ra != nil && !kept["envoy.filters.http.ratelimit"] {
				delete(ra, "rate_limits")
			}
		}
	}
}

// stripPerFilter drops the typed_per_filter_config entries of filters not
// kept.
func stripPerFilter(m map[string]any, kept map[string]bool) {
	cfgs, _ := m["typed_per_filter_config"].(map[string]any)
	for name := range cfgs {
		if !kept[name] {
			delete(cfgs, name)
		}
	}
	if len(cfgs) == 0 {
		delete(m, "typed_per_filter_config")
	}
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// otlpCluster is the cluster addTracing adds for Envoy's trace export.
const otlpCluster = "otlp"

// addTracing gives every HTTP connection manager the OpenTelemetry tracer,
// sampling every request, exporting over gRPC to addr (renderSpec.otlp).
func addTracing(doc, res map[string]any, addr string) error {
	if _, ok := doc["layered_runtime"]; ok {
		return fmt.Errorf("%w: layered_runtime already set; merge the tracing keys into it", errRender)
	}
	la, err := loadAssignment(otlpCluster, []string{addr})
	if err != nil {
		return err
	}
	res["clusters"] = append(asSlice(res["clusters"]), map[string]any{
		"name":            otlpCluster,
		"type":            "STATIC",
		"connect_timeout": "1s",
		"load_assignment": la,
		"typed_extension_protocol_options": map[string]any{
			"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": map[string]any{
				"@type":                "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
				"explicit_http_config": map[string]any{"http2_protocol_options": map[string]any{}},
			},
		},
	})
	// The OpenTelemetry tracer (one per worker) exports when it holds
	// min_flush_spans spans or every flush_interval_ms.
	doc["layered_runtime"] = map[string]any{"layers": []any{map[string]any{
		"name": "tracing",
		"static_layer": map[string]any{
			"tracing.opentelemetry.min_flush_spans":   1,
			"tracing.opentelemetry.flush_interval_ms": 100,
		},
	}}}
	n := 0
	for _, l := range asSlice(res["listeners"]) {
		lm, _ := l.(map[string]any)
		for _, ch := range asSlice(lm["filter_chains"]) {
			chm, _ := ch.(map[string]any)
			for _, f := range asSlice(chm["filters"]) {
				fm, _ := f.(map[string]any)
				hcm, _ := fm["typed_config"].(map[string]any)
				if hcm == nil || fm["name"] != "envoy.filters.network.http_connection_manager" {
					continue
				}
				hcm["tracing"] = map[string]any{
					"random_sampling": map[string]any{"value": 100},
					"provider": map[string]any{
						"name": "envoy.tracers.opentelemetry",
						"typed_config": map[string]any{
							"@type":        "type.googleapis.com/envoy.config.trace.v3.OpenTelemetryConfig",
							"grpc_service": map[string]any{"envoy_grpc": map[string]any{"cluster_name": otlpCluster}, "timeout": "1s"},
							"service_name": "envoy",
						},
					},
				}
				n++
			}
		}
	}
	if n == 0 {
		return fmt.Errorf("%w: no http_connection_manager to trace", errRender)
	}
	return nil
}

// eachHCM calls fn with every HTTP connection manager of the listener.
func eachHCM(listener map[string]any, fn func(hcm map[string]any) error) error {
	for _, ch := range asSlice(listener["filter_chains"]) {
		chm, _ := ch.(map[string]any)
		for _, f := range asSlice(chm["filters"]) {
			fm, _ := f.(map[string]any)
			hcm, _ := fm["typed_config"].(map[string]any)
			if hcm == nil || fm["name"] != "envoy.filters.network.http_connection_manager" {
				continue
			}
			if err := fn(hcm); err != nil {
				return err
			}
		}
	}
	return nil
}

// useTestJWKS points every provider of the HCM's jwt_authn filters at the
// JWKS file jwks (renderSpec.jwks).
func useTestJWKS(hcm map[string]any, jwks string) error {
	for _, hf := range asSlice(hcm["http_filters"]) {
		m, _ := hf.(map[string]any)
		if m == nil || m["name"] != "envoy.filters.http.jwt_authn" {
			continue
		}
		if jwks == "" {
			return fmt.Errorf("%w: a jwt_authn filter and no test JWKS", errRender)
		}
		cfg, _ := m["typed_config"].(map[string]any)
		providers, _ := cfg["providers"].(map[string]any)
		if len(providers) == 0 {
			return fmt.Errorf("%w: jwt_authn without providers", errRender)
		}
		for name, p := range providers {
			pm, _ := p.(map[string]any)
			if pm == nil {
				return fmt.Errorf("%w: jwt_authn provider %q", errRender, name)
			}
			delete(pm, "remote_jwks")
			pm["local_jwks"] = map[string]any{"filename": jwks}
		}
	}
	return nil
}
