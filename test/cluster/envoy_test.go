package cluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The Envoy pod: a front proxy in a namespace the NetworkPolicy admits
// (extauthz.io/client=true), whose ext_authz filter calls extauthz through
// its Service. Its routes answer 200 themselves (direct_response), so every
// non-200 but a 429 is the check failing: with failure_mode_allow false a
// call Envoy cannot complete is a 503, which is what a rollout that drops
// connections shows a client.
const (
	envoyNamespace = "edge"
	envoyName      = "envoy"
	envoyPort      = 10000
)

// envoyConfig is the pod's bootstrap: the ext_authz filter as docs/envoy.md
// configures it (gRPC, failure_mode_allow false, a 2 s timeout), its
// cluster the Service's ClusterIP, over HTTP/2, no retries. Its admin
// listens on the pod's address: the test reads the cluster's connection
// counters around a rollout and a drain.
func envoyConfig(serviceIP string) string {
	return fmt.Sprintf(`static_resources:
  listeners:
  - name: ingress
    address: {socket_address: {address: 0.0.0.0, port_value: %[2]d}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          route_config:
            virtual_hosts:
            - name: orders
              domains: ["*"]
              routes:
              - match: {prefix: "/"}
                direct_response: {status: 200, body: {inline_string: "ok"}}
          http_filters:
          - name: envoy.filters.http.ext_authz
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz
              transport_api_version: V3
              failure_mode_allow: false
              status_on_error: {code: 503}
              grpc_service:
                envoy_grpc: {cluster_name: extauthz}
                timeout: 2s
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: extauthz
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {http2_protocol_options: {}}
    load_assignment:
      cluster_name: extauthz
      endpoints:
      - lb_endpoints:
        - endpoint: {address: {socket_address: {address: %[1]q, port_value: 9001}}}
admin:
  address: {socket_address: {address: 0.0.0.0, port_value: %[3]d}}
`, serviceIP, envoyPort, envoyAdminPort)
}

// startEnvoyPod runs the Envoy pod and returns its address once a request
// through it is allowed by extauthz.
func (c *cluster) startEnvoyPod(t *testing.T, serviceIP string) string {
	ctx := t.Context()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: envoyNamespace, Labels: map[string]string{"extauthz.io/client": "true"}}}
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if err := c.waitServiceAccount(ctx, envoyNamespace, "default"); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: envoyName}, Data: map[string]string{"envoy.yaml": envoyConfig(serviceIP)}}
	if _, err := c.client.CoreV1().ConfigMaps(envoyNamespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.client.CoreV1().Pods(envoyNamespace).Create(ctx, envoyPod(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var ip string
	err := poll(ctx, 2*time.Minute, func() error {
		p, err := c.client.CoreV1().Pods(envoyNamespace).Get(ctx, envoyName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ip = p.Status.PodIP; ip == "" || p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("pod %s: %s", p.Status.Phase, podSummary([]corev1.Pod{*p}))
		}
		allowed, err := envoyGet(ctx, http.DefaultClient, envoyURL(ip), "envoy-ready")
		if err == nil && !allowed {
			err = fmt.Errorf("denied")
		}
		return err
	})
	if err != nil {
		t.Fatalf("a request through the Envoy pod: %v", err)
	}
	t.Logf("Envoy pod %s/%s at %s: a request allowed by extauthz through the Service %s:9001", envoyNamespace, envoyName, ip, serviceIP)
	return ip
}

func envoyPod() *corev1.Pod {
	uid := int64(101) // the image's envoy user
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: envoyName, Labels: map[string]string{"app.kubernetes.io/name": envoyName}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: envoyName, Image: envoyImage, ImagePullPolicy: corev1.PullNever,
				// One worker: one connection to extauthz, so the drain of the
				// pod it landed on is the case every rollout meets.
				Command:         []string{"envoy", "-c", "/etc/envoy/envoy.yaml", "--concurrency", "1", "--disable-hot-restart", "--log-level", "warn"},
				Ports:           []corev1.ContainerPort{{Name: "http", ContainerPort: envoyPort}},
				VolumeMounts:    []corev1.VolumeMount{{Name: "config", MountPath: "/etc/envoy", ReadOnly: true}},
				SecurityContext: &corev1.SecurityContext{RunAsUser: &uid, RunAsGroup: &uid},
			}},
			Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
				ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: envoyName}},
			}}},
		},
	}
}

func envoyURL(ip string) string {
	return "http://" + net.JoinHostPort(ip, fmt.Sprint(envoyPort))
}

// envoyGet sends a tenant's GET through Envoy: 200 allowed, 429 denied,
// anything else an error naming the status, Envoy's details and the body.
func envoyGet(ctx context.Context, client *http.Client, base, tenant string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/orders/1", nil)
	if err != nil {
		return false, err
	}
	req.Host = "orders.shop.svc.cluster.local"
	req.Header.Set("x-tenant-id", tenant)
	resp, err := client.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	switch resp.StatusCode {
	case http.StatusOK:
		return true, nil
	case http.StatusTooManyRequests:
		return false, nil
	}
	return false, fmt.Errorf("HTTP %d through Envoy: %s", resp.StatusCode, strings.TrimSpace(string(body)))
}

// startEnvoyLoad sends GETs through the Envoy pod at a steady rate over
// several keep-alive connections, as clients of a front proxy do.
func startEnvoyLoad(ip string, conns, rate int) *load {
	return newLoad(conns, rate, func(i int) (string, call) {
		client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}}
		tenant := fmt.Sprintf("envoy-load-%d", i)
		return tenant, func(ctx context.Context, _ int) (bool, error) {
			return envoyGet(ctx, client, envoyURL(ip), tenant)
		}
	})
}

const envoyAdminPort = 9901

// envoyCounters reads the Envoy pod's counters of its connections to
// extauthz and of its ext_authz filter's errors.
func envoyCounters(ip string) (map[string]int, error) {
	filter := `^(cluster\.extauthz\.upstream_cx_|cluster\.extauthz\.upstream_rq_pending_failure|http\.ingress\.ext_authz\.)`
	resp, err := http.Get("http://" + net.JoinHostPort(ip, fmt.Sprint(envoyAdminPort)) + "/stats?filter=" + url.QueryEscape(filter))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, line := range strings.Split(string(b), "\n") {
		name, value, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		var v int
		if _, err := fmt.Sscan(value, &v); err == nil {
			out[name] = v
		}
	}
	return out, nil
}

// counterDelta is what moved between two readings, for a log line.
func counterDelta(before, after map[string]int) string {
	var parts []string
	for name, v := range after {
		if d := v - before[name]; d != 0 && !strings.HasSuffix(name, "_active") {
			parts = append(parts, fmt.Sprintf("%s +%d", strings.TrimPrefix(name, "cluster.extauthz."), d))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
