package gateway

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"
	"text/template"
)

// egConfig is the EnvoyGateway resource the controller starts with: the
// standalone mode of Envoy Gateway's docs (provider Custom, a File
// resource provider, Host infrastructure with every XDG directory in the
// test's), a Redis rateLimit backend, and the extension APIs the
// resources below use (Backend for a loopback upstream, Lua,
// EnvoyPatchPolicy). Its admin server moves to a free port and its
// Prometheus endpoint is off (both default to 19000/19001, which a
// machine running other tests may hold).
const egConfig = `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: EnvoyGateway
gateway:
  controllerName: gateway.envoyproxy.io/gatewayclass-controller
provider:
  type: Custom
  custom:
    resource:
      type: File
      file:
        paths: ["{{.Resources}}"]
    infrastructure:
      type: Host
      host:
        configHome: {{.ConfigHome}}
        dataHome: {{.DataHome}}
        stateHome: {{.StateHome}}
        runtimeDir: {{.RuntimeDir}}
rateLimit:
  backend:
    type: Redis
    redis:
      url: {{.RedisAddr}}
extensionApis:
  enableBackend: true
  enableLua: true
  enableEnvoyPatchPolicy: true
admin:
  address:
    host: 127.0.0.1
    port: {{.AdminPort}}
telemetry:
  metrics:
    prometheus:
      disable: true
logging:
  level:
    default: info
`

// gatewayYAML is the application: a Gateway, two HTTPRoutes to the test's
// upstream (a Backend on loopback, which Envoy Gateway allows with Host
// infrastructure), the Lua filter that copies the upstream's
// X-Usage-Tokens header into dynamic metadata on the chat route, and the
// cost limit reading it.
//
// The request's cost is 0 (a check) read from metadata the Lua filter sets
// on the request path (it runs before the rate limit filter), not the
// documented `request: {from: Number, number: 0}`: Envoy Gateway v1.9.1's
// File provider panics on that field ("panic: unsupported type: uint64",
// in structured-merge-diff under its resourcesStore.storeObject: the
// fake client it keeps resources in cannot hold RateLimitCostSpecifier's
// *uint64 Number) and the controller exits. The Envoy config differs only
// in the request entry's hits_addend (a format reading 0 instead of the
// number 0); the RLS request extauthz gets is the same, hits_addend 0. The EnvoyProxy pins the Envoy version the Host
// infrastructure asks func-e for, which the test has placed in func-e's
// data directory (so nothing is downloaded).
const gatewayYAML = `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata:
  name: eg
spec:
  controllerName: gateway.envoyproxy.io/gatewayclass-controller
  parametersRef:
    group: gateway.envoyproxy.io
    kind: EnvoyProxy
    name: host-envoy
    namespace: default
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: EnvoyProxy
metadata:
  name: host-envoy
  namespace: default
spec:
  provider:
    type: Host
    host:
      envoyVersion: "{{.EnvoyVersion}}"
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: eg
  namespace: default
spec:
  gatewayClassName: eg
  listeners:
  - name: http
    protocol: HTTP
    port: {{.GatewayPort}}
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: Backend
metadata:
  name: upstream
  namespace: default
spec:
  endpoints:
  - ip:
      address: 127.0.0.1
      port: {{.UpstreamPort}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: users
  namespace: default
spec:
  parentRefs:
  - name: eg
  rules:
  - matches:
    - path:
        type: PathPrefix
        value: /users
    backendRefs:
    - group: gateway.envoyproxy.io
      kind: Backend
      name: upstream
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: chat
  namespace: default
spec:
  parentRefs:
  - name: eg
  rules:
  - matches:
    - path:
        type: PathPrefix
        value: /chat
    backendRefs:
    - group: gateway.envoyproxy.io
      kind: Backend
      name: upstream
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: EnvoyExtensionPolicy
metadata:
  name: usage-to-metadata
  namespace: default
spec:
  targetRefs:
  - group: gateway.networking.k8s.io
    kind: HTTPRoute
    name: chat
  lua:
  - type: Inline
    inline: |
      function envoy_on_request(request_handle)
        request_handle:streamInfo():dynamicMetadata():set("{{.CostNamespace}}", "{{.RequestKey}}", 0)
      end
      function envoy_on_response(response_handle)
        local header = response_handle:headers():get("x-usage-tokens")
        local tokens = header and tonumber(header)
        if tokens then
          response_handle:streamInfo():dynamicMetadata():set("{{.CostNamespace}}", "{{.CostKey}}", tokens)
        end
      end
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata:
  name: chat-token-budget
  namespace: default
spec:
  targetRefs:
  - group: gateway.networking.k8s.io
    kind: HTTPRoute
    name: chat
  rateLimit:
    type: Global
    global:
      rules:
      - clientSelectors:
        - headers:
          - name: x-user-id
            type: Distinct
        limit:
          requests: {{.Budget}}
          unit: Hour
        cost:
          request:
            from: Metadata
            metadata:
              namespace: {{.CostNamespace}}
              key: {{.RequestKey}}
          response:
            from: Metadata
            metadata:
              namespace: {{.CostNamespace}}
              key: {{.CostKey}}
`

// usersLimitYAML is the per-user limit, in a file of its own so that the
// test changes the policy the way an operator does: by editing the file.
const usersLimitYAML = `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata:
  name: users-per-user
  namespace: default
spec:
  targetRefs:
  - group: gateway.networking.k8s.io
    kind: HTTPRoute
    name: users
  rateLimit:
    type: Global
    global:
      rules:
      - clientSelectors:
        - headers:
          - name: x-user-id
            type: Distinct
        limit:
          requests: {{.PerMinute}}
          unit: Minute
`

// controlPlaneYAML is what a Kubernetes install has and a standalone one
// must be given. The Secret "envoy" in the controller's namespace is the
// certificate Envoy presents to the rate limit service (certgen creates it
// as a Secret on Kubernetes; the translator refuses global limits without
// it). The EnvoyPatchPolicy adapts the rate limit cluster Envoy Gateway
// generates for a Kubernetes Service (STRICT_DNS to
// envoy-ratelimit.envoy-gateway-system.svc.cluster.local:8081, trusting
// /certs/ca.crt) to this host: the service's loopback port, and the CA file
// certgen --local wrote. Everything else in that cluster (mutual TLS with
// the SDS-served client certificate, HTTP/2) stays as generated.
const controlPlaneYAML = `apiVersion: v1
kind: Secret
metadata:
  name: envoy
  namespace: envoy-gateway-system
type: kubernetes.io/tls
data:
  tls.crt: {{.EnvoyCert}}
  tls.key: {{.EnvoyKey}}
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: EnvoyPatchPolicy
metadata:
  name: ratelimit-on-this-host
  namespace: default
spec:
  targetRef:
    group: gateway.networking.k8s.io
    kind: Gateway
    name: eg
  type: JSONPatch
  jsonPatches:
  - type: type.googleapis.com/envoy.config.cluster.v3.Cluster
    name: ratelimit_cluster
    operation:
      op: replace
      path: /load_assignment/endpoints/0/lb_endpoints/0/endpoint/address/socket_address/address
      value: 127.0.0.1
  - type: type.googleapis.com/envoy.config.cluster.v3.Cluster
    name: ratelimit_cluster
    operation:
      op: replace
      path: /load_assignment/endpoints/0/lb_endpoints/0/endpoint/address/socket_address/port_value
      value: {{.RatelimitPort}}
  - type: type.googleapis.com/envoy.config.cluster.v3.Cluster
    name: ratelimit_cluster
    operation:
      op: replace
      path: /transport_socket/typed_config/common_tls_context/validation_context/trusted_ca/filename
      value: {{.EnvoyCA}}
`

// render executes a template over data into dir/name.
func render(t *testing.T, dir, name, tmpl string, data any) string {
	t.Helper()
	var b bytes.Buffer
	if err := template.Must(template.New(name).Option("missingkey=error").Parse(tmpl)).Execute(&b, data); err != nil {
		t.Fatalf("render %s: %v", name, err)
	}
	path := filepath.Join(dir, name)
	// Written whole and renamed in: the file provider never reads half a file.
	tmp := filepath.Join(filepath.Dir(dir), "."+name+".tmp")
	if err := os.WriteFile(tmp, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// b64File is a file's content, base64 (a Secret's data).
func b64File(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}
