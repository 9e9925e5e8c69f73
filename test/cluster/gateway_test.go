package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"text/template"
	"time"

	extcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

// Envoy Gateway's controller at the pinned release scripts/test-deps.sh
// builds, packed into the image its chart would pull (it is also the
// shutdown manager beside every Envoy it deploys).
const (
	envoyGatewayModule  = "github.com/envoyproxy/gateway"
	envoyGatewayVersion = "v1.9.1"
	envoyGatewayImage   = "docker.io/envoyproxy/gateway:" + envoyGatewayVersion

	egNamespace  = "envoy-gateway-system"
	appNamespace = "gateway-app"
	// ratelimitName is the Deployment Envoy Gateway makes for its global
	// rate limits; its container image is ours.
	ratelimitName = "envoy-ratelimit"
)

// egControllerYAML is Envoy Gateway's Helm chart, installed by hand (no
// helm here): the namespace, the certgen Job, the controller's ConfigMap,
// Deployment and Service as the chart renders them, plus the Redis its
// rateLimit backend names. Two deviations, both about this node: the
// controller's service account is bound to cluster-admin (the chart's
// own ClusterRoles are many; what is tested is the controller driving
// us, not its RBAC), and every request for CPU and memory is small (one
// node with two cores runs all the tests' pods).
//
// The EnvoyGateway configuration is the chart's default, and what an
// operator swapping envoyproxy/ratelimit for extauthz sets: the rate
// limit Deployment's image (docs/deploy.md#envoy-gateway), two replicas
// of it, and Redis.
const egControllerYAML = `apiVersion: v1
kind: Namespace
metadata: {name: {{.NS}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: redis, namespace: {{.NS}}}
spec:
  replicas: 1
  selector: {matchLabels: {app: redis}}
  template:
    metadata: {labels: {app: redis}}
    spec:
      containers:
      - name: redis
        image: {{.RedisImage}}
        imagePullPolicy: Never
        ports: [{containerPort: 6379}]
        readinessProbe: {tcpSocket: {port: 6379}, periodSeconds: 1}
        resources: {requests: {cpu: 10m, memory: 32Mi}}
---
apiVersion: v1
kind: Service
metadata: {name: redis, namespace: {{.NS}}}
spec:
  selector: {app: redis}
  ports: [{port: 6379}]
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: envoy-gateway, namespace: {{.NS}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: envoy-gateway-test-admin}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects:
- {kind: ServiceAccount, name: envoy-gateway, namespace: {{.NS}}}
---
apiVersion: batch/v1
kind: Job
metadata: {name: eg-gateway-helm-certgen, namespace: {{.NS}}}
spec:
  backoffLimit: 1
  template:
    metadata: {labels: {app: certgen}}
    spec:
      serviceAccountName: envoy-gateway
      restartPolicy: Never
      containers:
      - name: envoy-gateway-certgen
        image: {{.EGImage}}
        imagePullPolicy: Never
        command: [envoy-gateway, certgen, --disable-topology-injector]
        env:
        - name: ENVOY_GATEWAY_NAMESPACE
          valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
        - {name: KUBERNETES_CLUSTER_DOMAIN, value: cluster.local}
        resources: {requests: {cpu: 10m, memory: 32Mi}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: envoy-gateway-config, namespace: {{.NS}}}
data:
  envoy-gateway.yaml: |
    apiVersion: gateway.envoyproxy.io/v1alpha1
    kind: EnvoyGateway
    gateway:
      controllerName: gateway.envoyproxy.io/gatewayclass-controller
    logging:
      level: {default: info}
    provider:
      type: Kubernetes
      kubernetes:
        rateLimitDeployment:
          replicas: 2
          container:
            image: {{.AppImage}}
            resources: {requests: {cpu: 10m, memory: 32Mi}}
        shutdownManager:
          image: {{.EGImage}}
    rateLimit:
      backend:
        type: Redis
        redis:
          url: {{.RedisHost}}:6379
    extensionApis:
      enableLua: true
    proxyTopologyInjector:
      disabled: true
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: envoy-gateway
  namespace: {{.NS}}
  labels: {control-plane: envoy-gateway}
spec:
  replicas: 1
  selector: {matchLabels: {control-plane: envoy-gateway}}
  template:
    metadata: {labels: {control-plane: envoy-gateway}}
    spec:
      serviceAccountName: envoy-gateway
      terminationGracePeriodSeconds: 10
      containers:
      - name: envoy-gateway
        image: {{.EGImage}}
        imagePullPolicy: Never
        args: [server, --config-path=/config/envoy-gateway.yaml]
        env:
        - name: ENVOY_GATEWAY_NAMESPACE
          valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
        - {name: KUBERNETES_CLUSTER_DOMAIN, value: cluster.local}
        ports:
        - {name: grpc, containerPort: 18000}
        - {name: ratelimit, containerPort: 18001}
        - {name: wasm, containerPort: 18002}
        - {name: metrics, containerPort: 19001}
        startupProbe: {httpGet: {path: /healthz, port: 8081}, failureThreshold: 60, periodSeconds: 1}
        livenessProbe: {httpGet: {path: /healthz, port: 8081}, periodSeconds: 20}
        readinessProbe: {httpGet: {path: /readyz, port: 8081}, periodSeconds: 2}
        resources: {requests: {cpu: 10m, memory: 64Mi}}
        securityContext:
          allowPrivilegeEscalation: false
          capabilities: {drop: [ALL]}
          privileged: false
          runAsNonRoot: true
          runAsUser: 65532
          runAsGroup: 65532
          readOnlyRootFilesystem: true
          seccompProfile: {type: RuntimeDefault}
        volumeMounts:
        - {name: envoy-gateway-config, mountPath: /config, readOnly: true}
        - {name: certs, mountPath: /certs, readOnly: true}
        - {name: wasm-cache, mountPath: /var/lib/eg/wasm}
      volumes:
      - name: envoy-gateway-config
        configMap: {name: envoy-gateway-config}
      - name: certs
        secret: {secretName: envoy-gateway}
      - name: wasm-cache
        emptyDir: {}
---
apiVersion: v1
kind: Service
metadata:
  name: envoy-gateway
  namespace: {{.NS}}
  labels: {control-plane: envoy-gateway}
spec:
  selector: {control-plane: envoy-gateway}
  ports:
  - {name: grpc, port: 18000, targetPort: 18000}
  - {name: ratelimit, port: 18001, targetPort: 18001}
  - {name: wasm, port: 18002, targetPort: 18002}
  - {name: metrics, port: 19001, targetPort: 19001}
`

// egAppYAML is what an application team writes: a GatewayClass whose
// EnvoyProxy runs the pinned Envoy behind a ClusterIP Service (nothing
// implements LoadBalancer here), a Gateway, two HTTPRoutes to an upstream,
// a per-user limit, and a token budget whose cost is read from the
// upstream's X-Usage-Tokens header by a Lua filter (the shape of Envoy AI
// Gateway's token limits): the request's cost is the documented
// `from: Number, number: 0`, a check.
//
// The upstream is an Envoy answering 200 itself, its X-Usage-Tokens taken
// from the request's X-Usage (so the test says what each reply costs).
const egAppYAML = `apiVersion: v1
kind: Namespace
metadata: {name: {{.AppNS}}}
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: EnvoyProxy
metadata: {name: on-this-node, namespace: {{.NS}}}
spec:
  shutdown: {drainTimeout: 1s, minDrainDuration: 0s}
  provider:
    type: Kubernetes
    kubernetes:
      envoyService: {type: ClusterIP}
      envoyDeployment:
        replicas: 1
        container:
          image: {{.EnvoyImage}}
          resources: {requests: {cpu: 10m, memory: 64Mi}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: eg}
spec:
  controllerName: gateway.envoyproxy.io/gatewayclass-controller
  parametersRef: {group: gateway.envoyproxy.io, kind: EnvoyProxy, name: on-this-node, namespace: {{.NS}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: eg, namespace: {{.AppNS}}}
spec:
  gatewayClassName: eg
  listeners:
  - {name: http, protocol: HTTP, port: 8080}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: upstream, namespace: {{.AppNS}}}
data:
  envoy.yaml: |
    static_resources:
      listeners:
      - name: upstream
        address: {socket_address: {address: 0.0.0.0, port_value: 8080}}
        filter_chains:
        - filters:
          - name: envoy.filters.network.http_connection_manager
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
              stat_prefix: upstream
              route_config:
                virtual_hosts:
                - name: upstream
                  domains: ["*"]
                  routes:
                  - match: {prefix: /}
                    direct_response: {status: 200, body: {inline_string: "ok\n"}}
                    response_headers_to_add:
                    - header: {key: x-usage-tokens, value: "%REQ(x-usage)%"}
              http_filters:
              - name: envoy.filters.http.router
                typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: upstream, namespace: {{.AppNS}}}
spec:
  replicas: 1
  selector: {matchLabels: {app: upstream}}
  template:
    metadata: {labels: {app: upstream}}
    spec:
      containers:
      - name: envoy
        image: {{.EnvoyImage}}
        imagePullPolicy: Never
        command: [envoy, -c, /etc/envoy/envoy.yaml, --concurrency, "1", --disable-hot-restart, --log-level, warn]
        ports: [{containerPort: 8080}]
        readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}
        resources: {requests: {cpu: 10m, memory: 32Mi}}
        securityContext: {runAsUser: 101, runAsGroup: 101}
        volumeMounts: [{name: config, mountPath: /etc/envoy, readOnly: true}]
      volumes:
      - name: config
        configMap: {name: upstream}
---
apiVersion: v1
kind: Service
metadata: {name: upstream, namespace: {{.AppNS}}}
spec:
  selector: {app: upstream}
  ports: [{port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: users, namespace: {{.AppNS}}}
spec:
  parentRefs: [{name: eg}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /users}}]
    backendRefs: [{name: upstream, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: chat, namespace: {{.AppNS}}}
spec:
  parentRefs: [{name: eg}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /chat}}]
    backendRefs: [{name: upstream, port: 8080}]
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: EnvoyExtensionPolicy
metadata: {name: usage-to-metadata, namespace: {{.AppNS}}}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: chat}]
  lua:
  - type: Inline
    inline: |
      function envoy_on_response(response_handle)
        local tokens = tonumber(response_handle:headers():get("x-usage-tokens") or "")
        if tokens then
          response_handle:streamInfo():dynamicMetadata():set("io.extauthz.usage", "tokens", tokens)
        end
      end
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: users-per-user, namespace: {{.AppNS}}}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: users}]
  rateLimit:
    type: Global
    global:
      rules:
      - clientSelectors: [{headers: [{name: x-user-id, type: Distinct}]}]
        limit: {requests: {{.PerUser}}, unit: Day}
---
apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: chat-token-budget, namespace: {{.AppNS}}}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: chat}]
  rateLimit:
    type: Global
    global:
      rules:
      - clientSelectors: [{headers: [{name: x-user-id, type: Distinct}]}]
        limit: {requests: {{.Budget}}, unit: Day}
        cost:
          request: {from: Number, number: 0}
          response:
            from: Metadata
            metadata: {namespace: io.extauthz.usage, key: tokens}
`

type egData struct {
	NS, AppNS                                 string
	EGImage, AppImage, RedisImage, EnvoyImage string
	RedisHost                                 string
	PerUser, Budget                           int
}

func (c *cluster) egObjects(t *testing.T, tmpl string, d egData) []*unstructured.Unstructured {
	t.Helper()
	var b bytes.Buffer
	if err := template.Must(template.New("eg").Option("missingkey=error").Parse(tmpl)).Execute(&b, d); err != nil {
		t.Fatal(err)
	}
	objs, err := decodeYAML(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// TestEnvoyGatewayDrivesExtauthzOnANode installs Envoy Gateway's
// controller on the node with its rate limit Deployment's image set to
// ours, and checks through the Envoy it deploys: a per-user limit holds
// exactly, a token budget charged at stream end trips, a policy edit
// reaches our pods over xDS without a restart, and our gRPC port takes
// only Envoy Gateway's mutual TLS.
func TestEnvoyGatewayDrivesExtauthzOnANode(t *testing.T) {
	c := needCluster(t)
	ctx := t.Context()
	d := egData{
		NS: egNamespace, AppNS: appNamespace,
		EGImage: envoyGatewayImage, AppImage: appImage, RedisImage: redisImage, EnvoyImage: envoyImage,
		RedisHost: dnsName("redis", egNamespace),
		PerUser:   3, Budget: 1000,
	}
	start := time.Now()
	c.applyCRDs(t)
	t.Cleanup(func() { c.removeGatewayInstall(t) })
	c.applyAll(t, c.egObjects(t, egControllerYAML, d))
	if err := c.waitJob(ctx, egNamespace, "eg-gateway-helm-certgen", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := c.waitRolledOutIn(ctx, egNamespace, "envoy-gateway", 1, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("Envoy Gateway's controller Ready %s after the start", time.Since(start).Round(time.Second))
	c.applyAll(t, c.egObjects(t, egAppYAML, d))
	if err := c.waitRolledOutIn(ctx, egNamespace, ratelimitName, 2, 3*time.Minute); err != nil {
		t.Fatalf("%v; pods: %s", err, c.podsIn(ctx, egNamespace))
	}
	proxy := c.waitGatewayProxy(t)
	t.Logf("Envoy Gateway deployed its Envoy (%s) and two rate limit pods of our image %s after the start", proxy, time.Since(start).Round(time.Second))
	pods := c.ratelimitPods(t)

	gw := &gatewayClient{base: "http://" + net.JoinHostPort(proxy, "8080"), client: &http.Client{Timeout: 5 * time.Second}}
	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"PerUserLimitHolds", func(t *testing.T) {
			gw.waitRoutes(t)
			gw.expectLimit(t, "/users", "alice", d.PerUser)
			gw.expectLimit(t, "/users", "bob", d.PerUser)
		}},
		{"TokenBudgetTrips", func(t *testing.T) {
			// AI Gateway's own sequence: a check, a reply far past the
			// budget charged at stream end, and the next request refused.
			gw.want(t, "/chat", "carol", "10000", http.StatusOK)
			gw.want(t, "/chat", "carol", "", http.StatusTooManyRequests)
			gw.want(t, "/chat", "dave", "400", http.StatusOK)
			gw.want(t, "/chat", "dave", "400", http.StatusOK)
			gw.want(t, "/chat", "dave", "", http.StatusOK) // 800 of 1000
			gw.want(t, "/chat", "dave", "400", http.StatusOK)
			gw.want(t, "/chat", "dave", "", http.StatusTooManyRequests) // 1200
		}},
		{"PolicyEditReachesUsOverXDS", func(t *testing.T) { c.checkPolicyEdit(t, gw, pods, d.PerUser) }},
		{"OnlyMutualTLSReachesUs", func(t *testing.T) { c.checkRatelimitTLS(t, pods) }},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.run) {
			t.Fatalf("%s failed; the later steps depend on it. Pods: %s", s.name, c.podsIn(ctx, egNamespace))
		}
	}
}

// applyCRDs applies the Gateway API's and Envoy Gateway's CRDs, as its
// chart installs them, and waits until each is Established.
func (c *cluster) applyCRDs(t *testing.T) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(c.bins.envoyGatewayCRDs, "*.yaml"))
	sort.Strings(files)
	var objs []*unstructured.Unstructured
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		o, err := decodeYAML(b)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		objs = append(objs, o...)
	}
	c.applyAll(t, objs)
	crds, err := c.dynamicFor(t, "apiextensions.k8s.io", "v1", "customresourcedefinitions")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() != "CustomResourceDefinition" {
			continue
		}
		err := poll(t.Context(), time.Minute, func() error {
			got, err := crds.Get(t.Context(), o.GetName(), metav1.GetOptions{})
			if err != nil {
				return err
			}
			conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
			for _, cond := range conds {
				m, _ := cond.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return nil
				}
			}
			return fmt.Errorf("CRD %s not Established yet", o.GetName())
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// removeGatewayInstall deletes what the test made, so the node's other
// tests run as if it never had: the Gateway first (Envoy Gateway removes
// its Envoy), then the namespaces. It waits for neither: the run's
// teardown removes what is left.
func (c *cluster) removeGatewayInstall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	zero := int64(0)
	for _, ns := range []string{appNamespace, egNamespace} {
		if err := c.client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Logf("delete namespace %s: %v", ns, err)
		}
	}
	_ = c.client.RbacV1().ClusterRoleBindings().Delete(ctx, "envoy-gateway-test-admin", metav1.DeleteOptions{})
}

func (c *cluster) waitJob(ctx context.Context, ns, name string, timeout time.Duration) error {
	return poll(ctx, timeout, func() error {
		j, err := c.client.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range j.Status.Conditions {
			if cond.Type == batchv1.JobComplete && cond.Status == corev1.ConditionTrue {
				return nil
			}
			if cond.Type == batchv1.JobFailed && cond.Status == corev1.ConditionTrue {
				return processExited{fmt.Errorf("job %s/%s failed: %s; pods: %s", ns, name, cond.Message, c.podsIn(ctx, ns))}
			}
		}
		return fmt.Errorf("job %s/%s not complete; pods: %s", ns, name, c.podsIn(ctx, ns))
	})
}

func (c *cluster) podsIn(ctx context.Context, ns string) string {
	pods, err := c.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	return podSummary(pods.Items)
}

// waitGatewayProxy waits for the Envoy Deployment Envoy Gateway makes for
// the Gateway and returns its Service's address.
func (c *cluster) waitGatewayProxy(t *testing.T) string {
	t.Helper()
	ctx := t.Context()
	sel := labels.Set{"gateway.envoyproxy.io/owning-gateway-name": "eg", "gateway.envoyproxy.io/owning-gateway-namespace": appNamespace}.String()
	var ip string
	err := poll(ctx, 3*time.Minute, func() error {
		ds, err := c.client.AppsV1().Deployments(egNamespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return err
		}
		if len(ds.Items) != 1 {
			return fmt.Errorf("%d Envoy Deployments for the Gateway; pods: %s", len(ds.Items), c.podsIn(ctx, egNamespace))
		}
		if err := rolledOut(&ds.Items[0], 1); err != nil {
			return fmt.Errorf("%v; pods: %s", err, c.podsIn(ctx, egNamespace))
		}
		svcs, err := c.client.CoreV1().Services(egNamespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return err
		}
		if len(svcs.Items) != 1 || svcs.Items[0].Spec.ClusterIP == "" {
			return fmt.Errorf("%d Envoy Services for the Gateway", len(svcs.Items))
		}
		ip = svcs.Items[0].Spec.ClusterIP
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ip
}

// ratelimitPods are the rate limit Deployment's pods, checked to run our
// image (the peer's is not on this node: nothing is pulled).
func (c *cluster) ratelimitPods(t *testing.T) []corev1.Pod {
	t.Helper()
	d, err := c.client.AppsV1().Deployments(egNamespace).Get(t.Context(), ratelimitName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if img := d.Spec.Template.Spec.Containers[0].Image; img != appImage {
		t.Fatalf("the rate limit Deployment runs %s, want %s", img, appImage)
	}
	pods, err := c.client.CoreV1().Pods(egNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(d.Spec.Selector)})
	if err != nil {
		t.Fatal(err)
	}
	var ready []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.PodIP != "" {
			ready = append(ready, p)
		}
	}
	if len(ready) != 2 {
		t.Fatalf("%d rate limit pods, want 2: %s", len(ready), podSummary(pods.Items))
	}
	return ready
}

// checkPolicyEdit raises the per-user limit in its BackendTrafficPolicy
// and measures how long until the Envoy Gateway deployment enforces it,
// then checks that our pods took it without a restart.
func (c *cluster) checkPolicyEdit(t *testing.T, gw *gatewayClient, before []corev1.Pod, old int) {
	ctx := t.Context()
	raised := old + 2
	btp, err := c.dynamicFor(t, "gateway.envoyproxy.io", "v1alpha1", "backendtrafficpolicies")
	if err != nil {
		t.Fatal(err)
	}
	patch := fmt.Sprintf(`[{"op":"replace","path":"/spec/rateLimit/global/rules/0/limit/requests","value":%d}]`, raised)
	edited := time.Now()
	if _, err := btp.Namespace(appNamespace).Patch(ctx, "users-per-user", types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// A fresh user each round: the first whose request old+1 passes saw
	// the new limit. Both replicas must have it: two fresh users in a row
	// must get exactly the new limit.
	round := 0
	seen, firstRound := time.Duration(0), 0
	err = poll(ctx, 2*time.Minute, func() error {
		round++
		user := fmt.Sprintf("edit-%d", round)
		for i := 0; i < old; i++ {
			if code := gw.status(t, "/users", user, ""); code != http.StatusOK {
				return fmt.Errorf("request %d of %s: %d", i+1, user, code)
			}
		}
		if code := gw.status(t, "/users", user, ""); code != http.StatusOK {
			return fmt.Errorf("request %d of %s: %d, the old limit still holds", old+1, user, code)
		}
		if seen == 0 {
			seen, firstRound = time.Since(edited), round
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		gw.expectLimit(t, "/users", fmt.Sprintf("after-edit-%d", i), raised)
	}
	t.Logf("the edited limit (%d → %d per user) was enforced %s after the edit (controller reconcile, xDS to our pods), in round %d", old, raised, seen.Round(time.Millisecond), firstRound)
	after := c.ratelimitPods(t)
	for _, b := range before {
		found := false
		for _, a := range after {
			if a.UID == b.UID {
				found = true
				for _, cs := range a.Status.ContainerStatuses {
					if cs.RestartCount != 0 {
						t.Errorf("pod %s: container %s restarted %d times", a.Name, cs.Name, cs.RestartCount)
					}
				}
			}
		}
		if !found {
			t.Errorf("pod %s was replaced: the edit should have reached it over xDS", b.Name)
		}
	}
}

// checkRatelimitTLS calls our gRPC port on a rate limit pod three ways:
// in plain text and with TLS but no client certificate (both refused), and
// with the certificate certgen made for Envoy (answered).
func (c *cluster) checkRatelimitTLS(t *testing.T, pods []corev1.Pod) {
	ctx := t.Context()
	sec, err := c.client.CoreV1().Secrets(egNamespace).Get(ctx, "envoy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(sec.Data["ca.crt"]) {
		t.Fatal("secret envoy: no ca.crt")
	}
	cert, err := tls.X509KeyPair(sec.Data["tls.crt"], sec.Data["tls.key"])
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(pods[0].Status.PodIP, "8081")
	// certgen's certificate names *.envoy-gateway-system, as Envoy
	// Gateway's rate limit cluster checks it.
	serverName := ratelimitName + "." + egNamespace
	call := func(creds credentials.TransportCredentials) error {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			return err
		}
		defer conn.Close()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(cctx, &rlsv3.RateLimitRequest{
			Domain:      "tls-probe",
			Descriptors: []*extcommon.RateLimitDescriptor{{Entries: []*extcommon.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}},
		})
		return err
	}
	if err := call(insecure.NewCredentials()); err == nil {
		t.Error("plain-text gRPC to the rate limit pod was answered; Envoy Gateway configures TLS")
	}
	if err := call(credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: serverName})); err == nil {
		t.Error("TLS without a client certificate was answered; Envoy Gateway configures mutual TLS")
	}
	if err := call(credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: serverName, Certificates: []tls.Certificate{cert}})); err != nil {
		t.Errorf("with Envoy's certificate from certgen: %v", err)
	}
}

// gatewayClient sends requests through the Envoy Gateway deployed.
type gatewayClient struct {
	base   string
	client *http.Client
}

// waitRoutes waits until both routes answer: the Envoy is Ready before its
// routes and limits arrive.
func (g *gatewayClient) waitRoutes(t *testing.T) {
	t.Helper()
	// No keep-alive while waiting: a connection made before kube-proxy's
	// rules for the Service leaves by the default route (see
	// checkServiceRouting) and must not be reused.
	keep := g.client
	g.client = &http.Client{Timeout: keep.Timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	defer func() { g.client = keep }()
	err := poll(t.Context(), 2*time.Minute, func() error {
		for _, path := range []string{"/users", "/chat"} {
			code, err := g.do(path, "route-probe-"+strings.TrimPrefix(path, "/"), "")
			if err != nil {
				return err
			}
			if code != http.StatusOK {
				return fmt.Errorf("%s: HTTP %d", path, code)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// expectLimit: exactly limit requests of a fresh user pass, the next is 429.
func (g *gatewayClient) expectLimit(t *testing.T, path, user string, limit int) {
	t.Helper()
	for i := 1; i <= limit; i++ {
		g.want(t, path, user, "", http.StatusOK)
	}
	g.want(t, path, user, "", http.StatusTooManyRequests)
}

func (g *gatewayClient) want(t *testing.T, path, user, usage string, want int) {
	t.Helper()
	if got := g.status(t, path, user, usage); got != want {
		t.Fatalf("GET %s as %s (usage %q): HTTP %d, want %d", path, user, usage, got, want)
	}
}

func (g *gatewayClient) status(t *testing.T, path, user, usage string) int {
	t.Helper()
	code, err := g.do(path, user, usage)
	if err != nil {
		t.Fatal(err)
	}
	return code
}

func (g *gatewayClient) do(path, user, usage string) (int, error) {
	req, err := http.NewRequest(http.MethodGet, g.base+path, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("x-user-id", user)
	if usage != "" {
		req.Header.Set("x-usage", usage)
	}
	resp, err := g.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// dynamicFor is a dynamic client of one resource (the CRDs' kinds have no
// typed client here).
func (c *cluster) dynamicFor(t *testing.T, group, version, resource string) (dynamic.NamespaceableResourceInterface, error) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.cfg)
	if err != nil {
		return nil, err
	}
	return dyn.Resource(schema.GroupVersionResource{Group: group, Version: version, Resource: resource}), nil
}
