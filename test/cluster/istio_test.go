package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"
)

// Istio from the one istio.io/istio pseudo-version whose dependencies the
// module proxy serves (scripts/test-deps.sh says why): istiod, its sidecar
// agent and istioctl, built with their version set to the tag below. The
// sidecar's Envoy is the pinned 1.40, not Istio's own build of Envoy.
const (
	istioModule  = "istio.io/istio"
	istioVersion = "v0.0.0-20260827124520-eed52ebb66ad"
	istioHub     = "docker.io/istio"
	istioTag     = "1.31-dev"
	istiodImage  = istioHub + "/pilot:" + istioTag
	proxyImage   = istioHub + "/proxyv2:" + istioTag
	meshappImage = "extauthz.test/meshapp:1"

	meshNamespace = "mesh-app"
	// serverAuthority is the authority the clients call the server by; the
	// test policy gives its (tenant, authority) descriptor an exact limit.
	serverAuthority = "server." + meshNamespace + ".svc.cluster.local:8080"
	// The test policy's exact limits (a day, fixed windows: a run never
	// crosses one in practice).
	authzLimit = 20 // the ext_authz route /limited, per tenant
	rlsLimit   = 30 // the RLS descriptor (tenant, authority=serverAuthority)
)

// istioProxyImage is Istio's proxyv2 image made of host files: pilot-agent,
// the pinned Envoy with its libraries, the bootstrap template of the same
// Istio, and iptables (the nf_tables build and its extensions) for the
// istio-init container that redirects the pod's traffic to the sidecar.
func (c *cluster) istioProxyImage() (ociImage, error) {
	img := ociImage{name: proxyImage, entrypoint: []string{"/usr/local/bin/pilot-agent"},
		env: []string{"PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		files: []imageFile{
			{src: c.bins.istioAgent, dst: "/usr/local/bin/pilot-agent", mode: 0o755},
			{src: c.bins.istioBootstrap, dst: "/var/lib/istio/envoy/envoy_bootstrap_tmpl.json", mode: 0o644},
			{src: "/etc/protocols", dst: "/etc/protocols", mode: 0o644},
		}}
	envoy, err := hostEnvoy()
	if err != nil {
		return img, fmt.Errorf("%w: the sidecar's Envoy: %v", errMissing, err)
	}
	files, err := binaryWithLibraries(envoy, "/usr/local/bin/envoy")
	if err != nil {
		return img, err
	}
	img.files = append(img.files, files...)
	xtables, err := exec.LookPath("xtables-nft-multi")
	if err != nil {
		return img, fmt.Errorf("%w: xtables-nft-multi (Debian package iptables), for istio-init", errMissing)
	}
	if files, err = binaryWithLibraries(xtables, "/usr/sbin/xtables-nft-multi"); err != nil {
		return img, err
	}
	img.files = append(img.files, files...)
	for _, name := range []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore",
		"iptables-nft", "iptables-nft-save", "iptables-nft-restore", "ip6tables-nft", "ip6tables-nft-save", "ip6tables-nft-restore"} {
		img.files = append(img.files, imageFile{dst: "/usr/sbin/" + name, link: "xtables-nft-multi"})
	}
	exts, _ := filepath.Glob("/usr/lib/*/xtables/*.so")
	if len(exts) == 0 {
		return img, fmt.Errorf("%w: iptables' extensions (/usr/lib/*/xtables)", errMissing)
	}
	for _, e := range exts {
		img.files = append(img.files, imageFile{src: e, dst: e, mode: 0o644})
	}
	return img, nil
}

// TestIstioMeshOnANode runs Istio's control plane on the node with our
// shipped mesh configuration (k8s/istio/meshconfig.yaml as MeshConfig,
// k8s/istio/base applied), two client and two server workloads with
// injected sidecars, and checks that calls between them are limited by our
// service exactly, across every sidecar at once, through both the CUSTOM
// ext_authz provider and the rate limit EnvoyFilter, and replayed.
func TestIstioMeshOnANode(t *testing.T) {
	c := needCluster(t)
	ctx := t.Context()
	start := time.Now()
	t.Cleanup(func() { c.removeIstio(t) })

	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"IstiodInstalledByIstioctl", func(t *testing.T) {
			c.applyAll(t, c.istioManifest(t))
			if err := c.waitRolledOutIn(ctx, "istio-system", "istiod", 1, 3*time.Minute); err != nil {
				t.Fatalf("%v; pods: %s", err, c.podsIn(ctx, "istio-system"))
			}
			c.waitInjectorCA(t)
			t.Logf("istiod Ready, its injector's CA bundle set, %s after the start", time.Since(start).Round(time.Second))
		}},
		{"ShippedMeshResourcesApplied", func(t *testing.T) {
			c.applyAll(t, render(t, filepath.Join(c.root, "k8s", "istio", "base")))
		}},
		{"ExtauthzWithTheTestPolicy", func(t *testing.T) { c.deployExtauthzForMesh(t) }},
		{"SidecarsInjected", func(t *testing.T) { c.deployMeshApp(t) }},
		{"LimitHoldsAcrossSidecarsExtAuthz", func(t *testing.T) {
			res := c.meshBurst(t, "/limited/x", "authz-tenant", 2*authzLimit)
			if len(res.other) > 0 {
				t.Errorf("calls neither allowed nor denied: %v", res.other)
			}
			if res.allowed != authzLimit {
				t.Errorf("%d of %d calls allowed across the sidecars, want exactly %d (the ext_authz route's limit): %s", res.allowed, 2*authzLimit, authzLimit, res)
			}
			if len(res.servedBy) < 2 {
				t.Errorf("the allowed calls reached %d server pod(s), want both: the limit must hold across sidecars", len(res.servedBy))
			}
			t.Logf("ext_authz (CUSTOM provider): %s", res)
		}},
		{"LimitHoldsAcrossSidecarsRLS", func(t *testing.T) {
			res := c.meshBurst(t, "/anything", "rls-tenant", 2*rlsLimit)
			if len(res.other) > 0 {
				t.Errorf("calls neither allowed nor denied: %v", res.other)
			}
			if res.allowed != rlsLimit {
				t.Errorf("%d of %d calls allowed across the sidecars, want exactly %d (the descriptor's limit): %s", res.allowed, 2*rlsLimit, rlsLimit, res)
			}
			if res.rlsDenied != 2*rlsLimit-rlsLimit {
				t.Errorf("%d denials carried x-envoy-ratelimited, want all %d: the rate limit filter decides these", res.rlsDenied, rlsLimit)
			}
			t.Logf("rate limit filter (EnvoyFilter extauthz-ratelimit): %s", res)
		}},
		{"ReplayedThroughTheMesh", func(t *testing.T) { c.checkMeshReplay(t) }},
		{"EverySidecarAckedItsConfig", func(t *testing.T) { c.checkSidecarsAcked(t) }},
		{"SidecarToSidecarIsMutualTLS", func(t *testing.T) { c.checkStrictMTLS(t) }},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.run) {
			c.dumpSidecars(t)
			t.Fatalf("%s failed; the later steps depend on it. Pods: istio-system %s; %s %s", s.name,
				c.podsIn(ctx, "istio-system"), meshNamespace, c.podsIn(ctx, meshNamespace))
		}
	}
}

// istioManifest renders Istio's install with istioctl (`istioctl manifest
// generate`, what `istioctl install` applies): the minimal profile,
// MeshConfig from k8s/istio/meshconfig.yaml, the images packed here, small
// requests. Two istiod settings leave out filters only Istio's own Envoy
// build has (metadata exchange and its ALPN filter, which stock Envoy 1.40
// rejects), and telemetry is off (its stats filter is Istio's too).
func (c *cluster) istioManifest(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.root, "k8s", "istio", "meshconfig.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var mesh struct {
		MeshConfig map[string]any `json:"meshConfig"`
	}
	if err := yaml.Unmarshal(b, &mesh); err != nil || mesh.MeshConfig == nil {
		t.Fatalf("k8s/istio/meshconfig.yaml: no meshConfig (%v)", err)
	}
	// Access logs on stdout: the sidecars' logs (printed when a step
	// fails) then say which filter answered each call and why.
	mesh.MeshConfig["accessLogFile"] = "/dev/stdout"
	small := map[string]any{"requests": map[string]any{"cpu": "10m", "memory": "64Mi"}}
	iop := map[string]any{
		"apiVersion": "install.istio.io/v1alpha1",
		"kind":       "IstioOperator",
		"spec": map[string]any{
			"profile":    "minimal",
			"hub":        istioHub,
			"tag":        istioTag,
			"meshConfig": mesh.MeshConfig,
			"values": map[string]any{
				"global": map[string]any{
					"proxy":      map[string]any{"resources": small},
					"proxy_init": map[string]any{"resources": small},
				},
				"pilot": map[string]any{
					"resources": small,
					"env": map[string]any{
						"PILOT_ENABLE_METADATA_EXCHANGE": "false",
						"PILOT_ENABLE_ALPN_FILTER":       "false",
					},
				},
				"telemetry": map[string]any{"enabled": false},
			},
		},
	}
	spec, err := yaml.Marshal(iop)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "iop.yaml")
	if err := os.WriteFile(path, spec, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), c.bins.istioctl, "manifest", "generate", "-f", path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("istioctl manifest generate: %v\n%s", err, stderr.String())
	}
	// `istioctl install` creates the namespace itself; the manifest has none.
	objs, err := decodeYAML(append([]byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: istio-system}\n---\n"), out...))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// waitInjectorCA waits until istiod has written its CA into the sidecar
// injector's webhook: pods created before are not injected.
func (c *cluster) waitInjectorCA(t *testing.T) {
	t.Helper()
	err := poll(t.Context(), 2*time.Minute, func() error {
		w, err := c.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(t.Context(), "istio-sidecar-injector", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, h := range w.Webhooks {
			if len(h.ClientConfig.CABundle) == 0 {
				return fmt.Errorf("webhook %s: no CA bundle yet", h.Name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// deployExtauthzForMesh applies k8s/ (the test overlay) with the shipped
// policy plus what the checks need: an ext_authz route with an exact
// limit, an idempotency route, and an exact limit for the server's
// authority in the mesh domain. The shipped routes and descriptors are
// unchanged, so TestK8sOnANode's checks hold under either policy. The pods
// restart to load it now rather than within the kubelet's sync.
func (c *cluster) deployExtauthzForMesh(t *testing.T) {
	ctx := t.Context()
	objs := render(t, overlayDir())
	for _, o := range objs {
		if o.GetKind() == "ConfigMap" && o.GetName() == "extauthz-policy" {
			c.addMeshTestPolicy(t, o)
		}
	}
	c.applyAll(t, objs)
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"extauthz.io/mesh-test":%q}}}}}`, time.Now().Format(time.RFC3339Nano))
	if _, err := c.client.AppsV1().Deployments(namespace).Patch(ctx, appName, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.waitRolledOut(ctx, appName, replicas, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := c.waitRolledOut(ctx, "redis", 1, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
}

func (c *cluster) addMeshTestPolicy(t *testing.T, cm *unstructured.Unstructured) {
	t.Helper()
	httpPolicy, _, _ := unstructured.NestedString(cm.Object, "data", "http.yaml")
	mesh, _, _ := unstructured.NestedString(cm.Object, "data", "mesh.yaml")
	routes := regexp.MustCompile(`(?m)^  routes:.*\n`).FindStringIndex(httpPolicy)
	if routes == nil || !strings.Contains(mesh, "\ndescriptors:\n") {
		t.Fatal("the shipped policy changed shape: no http.routes or mesh descriptors to add the test's to")
	}
	httpPolicy = httpPolicy[:routes[1]] + fmt.Sprintf(`    - name: mesh-test-limited
      path_prefix: /limited
      rate_limits:
        - {requests_per_unit: %d, unit: day, algorithm: fixed_window, name: mesh-test-limited}
    - name: mesh-test-orders
      path_prefix: /orders
      methods: [POST]
      idempotency:
        key_required: true
`, authzLimit) + httpPolicy[routes[1]:]
	mesh = strings.TrimRight(mesh, "\n") + fmt.Sprintf(`
  - key: authority
    value: %s
    rate_limit: {unit: day, requests_per_unit: %d, algorithm: fixed_window}
`, serverAuthority, rlsLimit)
	if err := unstructured.SetNestedField(cm.Object, httpPolicy, "data", "http.yaml"); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(cm.Object, mesh, "data", "mesh.yaml"); err != nil {
		t.Fatal(err)
	}
}

// meshAppYAML: a namespace with injection on, two server pods labelled for
// the shipped AuthorizationPolicy and EnvoyFilters (ext_authz, rate limit,
// replay route, idempotency), and two client pods forwarding to the
// server's Service: each call leaves a client sidecar and enters a server
// sidecar.
const meshAppYAML = `apiVersion: v1
kind: Namespace
metadata: {name: %[1]s, labels: {istio-injection: enabled}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: server, namespace: %[1]s}
spec:
  replicas: 2
  selector: {matchLabels: {app: server}}
  template:
    metadata:
      labels: {app: server, extauthz.io/enabled: "true", extauthz.io/idempotency: "true"}
    spec:
      containers:
      - name: server
        image: %[2]s
        imagePullPolicy: Never
        ports: [{containerPort: 8080}]
        readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}
        resources: {requests: {cpu: 10m, memory: 16Mi}}
---
apiVersion: v1
kind: Service
metadata: {name: server, namespace: %[1]s}
spec:
  selector: {app: server}
  ports: [{name: http, port: 8080}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: client, namespace: %[1]s}
spec:
  replicas: 2
  selector: {matchLabels: {app: client}}
  template:
    metadata: {labels: {app: client}}
    spec:
      containers:
      - name: client
        image: %[2]s
        imagePullPolicy: Never
        env: [{name: MESHAPP_TARGET, value: "http://%[3]s"}]
        ports: [{containerPort: 8080}]
        readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}
        resources: {requests: {cpu: 10m, memory: 16Mi}}
`

func (c *cluster) deployMeshApp(t *testing.T) {
	ctx := t.Context()
	objs, err := decodeYAML(fmt.Appendf(nil, meshAppYAML, meshNamespace, meshappImage, serverAuthority))
	if err != nil {
		t.Fatal(err)
	}
	c.applyAll(t, objs)
	for _, d := range []string{"server", "client"} {
		if err := c.waitRolledOutIn(ctx, meshNamespace, d, 2, 3*time.Minute); err != nil {
			t.Fatalf("%v; pods: %s", err, c.podsIn(ctx, meshNamespace))
		}
	}
	pods, err := c.client.CoreV1().Pods(meshNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if !hasContainer(p, "istio-proxy") {
			t.Fatalf("pod %s has no istio-proxy sidecar: the injector did not run", p.Name)
		}
	}
	// The server's route and filters reach its sidecars after it is Ready:
	// wait until a call through the mesh is decided by extauthz.
	err = poll(ctx, 2*time.Minute, func() error {
		code, _, err := c.meshCall(ctx, c.clientIPs(t)[0], http.MethodGet, "/ready-probe", "ready-probe", "", nil)
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("a call through the mesh: HTTP %d", code)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Warm every path before the exact checks: each sidecar's first calls
	// open its connections to extauthz, and on a busy machine those first
	// calls can outlast the provider's 0.25 s timeout (a 503, fail closed).
	if res := c.meshBurst(t, "/warm-up", "warm-up", 32); res.allowed != 32 {
		t.Logf("warm-up: %s", res)
	}
}

func hasContainer(p corev1.Pod, name string) bool {
	for _, cs := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		if cs.Name == name {
			return true
		}
	}
	return false
}

// clientIPs are the client pods' addresses; the test calls them from the
// host, and they call the server through their sidecars.
func (c *cluster) clientIPs(t *testing.T) []string {
	t.Helper()
	pods, err := c.client.CoreV1().Pods(meshNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: "app=client"})
	if err != nil {
		t.Fatal(err)
	}
	var ips []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.PodIP != "" {
			ips = append(ips, p.Status.PodIP)
		}
	}
	if len(ips) != 2 {
		t.Fatalf("%d client pods with an address, want 2", len(ips))
	}
	return ips
}

// meshCall sends one request to a client pod, which forwards it to the
// server through the mesh; it returns the status, the response and its
// body.
func (c *cluster) meshCall(ctx context.Context, clientIP, method, path, tenant, key string, body []byte) (int, *http.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+net.JoinHostPort(clientIP, "8080")+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("x-tenant-id", tenant)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp.StatusCode, resp, nil
}

type burstResult struct {
	allowed, denied, rlsDenied int
	other                      []string
	servedBy                   map[string]int
}

func (r burstResult) String() string {
	return fmt.Sprintf("%d allowed, %d denied (%d by the rate limit filter), other %v, served by %v", r.allowed, r.denied, r.rlsDenied, r.other, r.servedBy)
}

var podInBody = regexp.MustCompile(`"pod":"([^"]+)"`)

// meshBurst sends n calls of one tenant at once, over 8 connections spread
// over both client pods (so over every client and server sidecar).
func (c *cluster) meshBurst(t *testing.T, path, tenant string, n int) burstResult {
	t.Helper()
	ips := c.clientIPs(t)
	res := burstResult{servedBy: map[string]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	calls := make(chan int, n)
	for i := range n {
		calls <- i
	}
	close(calls)
	for w := range 8 {
		wg.Go(func() {
			for range calls {
				code, resp, err := c.meshCall(t.Context(), ips[w%len(ips)], http.MethodGet, path, tenant, "", nil)
				mu.Lock()
				switch {
				case err != nil:
					res.other = append(res.other, err.Error())
				case code == http.StatusOK:
					res.allowed++
					b, _ := io.ReadAll(resp.Body)
					if m := podInBody.FindSubmatch(b); m != nil {
						res.servedBy[string(m[1])]++
					}
				case code == http.StatusTooManyRequests:
					res.denied++
					if resp.Header.Get("x-envoy-ratelimited") == "true" {
						res.rlsDenied++
					}
				default:
					res.other = append(res.other, fmt.Sprintf("HTTP %d", code))
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return res
}

// checkMeshReplay: a POST with an Idempotency-Key through one client's
// sidecar executes once; the same call through the other client (other
// sidecars, possibly the other server pod) is the first reply replayed;
// the same key with another body is 422.
func (c *cluster) checkMeshReplay(t *testing.T) {
	ctx := t.Context()
	ips := c.clientIPs(t)
	key := "mesh-replay-" + time.Now().Format("150405.000000")
	body := []byte(`{"item":"book","quantity":1}`)
	code, first, err := c.meshCall(ctx, ips[0], http.MethodPost, "/orders", "replay-tenant", key, body)
	if err != nil || code != http.StatusOK {
		t.Fatalf("first POST: HTTP %d, %v", code, err)
	}
	firstBody, _ := io.ReadAll(first.Body)
	if first.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first POST marked as replayed: %v", first.Header)
	}
	code, again, err := c.meshCall(ctx, ips[1], http.MethodPost, "/orders", "replay-tenant", key, body)
	if err != nil || code != http.StatusOK {
		t.Fatalf("retried POST: HTTP %d, %v", code, err)
	}
	againBody, _ := io.ReadAll(again.Body)
	if again.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("retried POST: Idempotent-Replayed %q, want true (headers %v)", again.Header.Get("Idempotent-Replayed"), again.Header)
	}
	if !bytes.Equal(firstBody, againBody) {
		t.Errorf("retried POST: body %s, want the first reply %s (a second execution)", againBody, firstBody)
	}
	code, _, err = c.meshCall(ctx, ips[1], http.MethodPost, "/orders", "replay-tenant", key, []byte(`{"item":"book","quantity":2}`))
	if err != nil || code != http.StatusUnprocessableEntity {
		t.Errorf("same key, another body: HTTP %d, %v, want 422", code, err)
	}
	t.Logf("replayed through the mesh: %s", bytes.TrimSpace(firstBody))
}

// checkSidecarsAcked asks istiod (its debug endpoint, /debug/syncz on
// 15014, with a token of its own service account as istioctl's debug
// commands present one) whether every mesh pod's Envoy acknowledged
// everything pushed to it: stock Envoy 1.40 accepting the listeners,
// routes and clusters of Istio plus our EnvoyFilters (ext_authz, the rate
// limit filter, ext_proc, the replay route), none rejected.
func (c *cluster) checkSidecarsAcked(t *testing.T) {
	ctx := t.Context()
	tok, err := c.client.CoreV1().ServiceAccounts("istio-system").CreateToken(ctx, "istiod",
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: []string{"istio-ca"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := c.client.CoreV1().Pods("istio-system").List(ctx, metav1.ListOptions{LabelSelector: "app=istiod"})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("istiod pods: %v (%d)", err, len(pods.Items))
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(pods.Items[0].Status.PodIP, "15014")+"/debug/syncz?namespace="+meshNamespace, nil)
	req.Header.Set("Authorization", "Bearer "+tok.Status.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("istiod /debug/syncz: HTTP %d: %s", resp.StatusCode, b)
	}
	var proxies []struct {
		Proxy        string `json:"proxy"`
		IstioVersion string `json:"istio_version"`
		Resources    map[string]struct {
			Sent, Acked, LastError string
		} `json:"resources"`
	}
	if err := json.Unmarshal(b, &proxies); err != nil {
		t.Fatalf("istiod /debug/syncz: %v: %s", err, b)
	}
	if len(proxies) != 4 {
		t.Errorf("%d mesh-app proxies connected to istiod, want 4 (two clients, two servers)", len(proxies))
	}
	for _, p := range proxies {
		for typ, r := range p.Resources {
			if r.LastError != "" || r.Sent != r.Acked {
				t.Errorf("proxy %s, %s: sent %s, acked %s, last error %q", p.Proxy, typ, r.Sent, r.Acked, r.LastError)
			}
		}
		t.Logf("proxy %s (Istio %s): %d resource types pushed, every one acknowledged", p.Proxy, p.IstioVersion, len(p.Resources))
	}
}

// checkStrictMTLS turns on STRICT mutual TLS for the app's namespace: a
// call from the host straight to a server pod (plain text, no sidecar of
// its own) is then refused by the server's sidecar, while calls through
// the clients' sidecars go on: those are mutual TLS.
func (c *cluster) checkStrictMTLS(t *testing.T) {
	ctx := t.Context()
	pa, err := decodeYAML(fmt.Appendf(nil, `apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: strict, namespace: %s}
spec:
  mtls: {mode: STRICT}
`, meshNamespace))
	if err != nil {
		t.Fatal(err)
	}
	servers, err := c.client.CoreV1().Pods(meshNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=server"})
	if err != nil || len(servers.Items) == 0 {
		t.Fatalf("server pods: %v", err)
	}
	direct := "http://" + net.JoinHostPort(servers.Items[0].Status.PodIP, "8080") + "/direct"
	plainCall := func() error {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(cctx, http.MethodGet, direct, nil)
		req.Header.Set("x-tenant-id", "plain-tenant")
		resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	if err := plainCall(); err != nil {
		t.Fatalf("before STRICT, a plain-text call to the server pod: %v (PERMISSIVE admits it)", err)
	}
	c.applyAll(t, pa)
	err = poll(ctx, time.Minute, func() error {
		if plainCall() == nil {
			return fmt.Errorf("a plain-text call to %s still answered", direct)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, ip := range c.clientIPs(t) {
		code, _, err := c.meshCall(ctx, ip, http.MethodGet, "/after-strict", fmt.Sprintf("strict-tenant-%d", i), "", nil)
		if err != nil || code != http.StatusOK {
			t.Errorf("through client %s under STRICT: HTTP %d, %v", ip, code, err)
		}
	}
}

// dumpSidecars prints the end of every mesh pod's istio-proxy and
// istio-init logs, read from the kubelet's log directory on this host.
func (c *cluster) dumpSidecars(t *testing.T) {
	for _, ns := range []string{meshNamespace, "istio-system"} {
		dirs, _ := filepath.Glob(filepath.Join(c.dir, "pod-logs", ns+"_*"))
		for _, d := range dirs {
			logs, _ := filepath.Glob(filepath.Join(d, "*", "*.log"))
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				if len(b) > 3<<10 {
					b = b[len(b)-3<<10:]
				}
				t.Logf("----- %s -----\n%s", strings.TrimPrefix(l, c.dir), b)
			}
		}
	}
}

// removeIstio deletes the mesh's namespaces, webhooks and cluster-wide
// objects, so the node's other tests see no injector. It waits for none
// of it: the run's teardown removes what is left.
func (c *cluster) removeIstio(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	zero := int64(0)
	for _, ns := range []string{meshNamespace, "istio-system"} {
		if err := c.client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
			t.Logf("delete namespace %s: %v", ns, err)
		}
	}
	whs := c.client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	if list, err := whs.List(ctx, metav1.ListOptions{LabelSelector: "app=sidecar-injector"}); err == nil {
		for _, w := range list.Items {
			_ = whs.Delete(ctx, w.Name, metav1.DeleteOptions{})
		}
	}
	vwhs := c.client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	if list, err := vwhs.List(ctx, metav1.ListOptions{LabelSelector: "app=istiod"}); err == nil {
		for _, w := range list.Items {
			_ = vwhs.Delete(ctx, w.Name, metav1.DeleteOptions{})
		}
	}
}
