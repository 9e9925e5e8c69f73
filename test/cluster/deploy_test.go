package cluster

import (
	"context"
	"fmt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"os"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

const (
	replicas = 2 // the test overlay's HPA minReplicas
	// The load of the rollout and drain: 4 connections, 40 calls/s in all.
	loadConns = 4
	loadRate  = 40
)

// TestK8sOnANode applies k8s/ (the dev overlay, through testdata/overlay)
// to the node and checks what only a running cluster shows. The steps
// build on each other, in order (one test: -shuffle reorders tests, not
// subtests).
func TestK8sOnANode(t *testing.T) {
	c := needCluster(t)
	ctx := t.Context()
	c.applyAll(t, render(t, overlayDir()))

	svcIP, envoyIP := "", ""
	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"RedisAndExtauthzReadyThroughProbes", func(t *testing.T) {
			if err := c.waitRolledOut(ctx, "redis", 1, 5*time.Minute); err != nil {
				t.Fatal(err)
			}
			// No replicas in the Deployment: the HPA scales it to its floor.
			if err := c.waitRolledOut(ctx, appName, replicas, 5*time.Minute); err != nil {
				t.Fatal(err)
			}
			c.checkProbesPassed(t)
		}},
		{"ServiceRoutesToEveryPod", func(t *testing.T) { svcIP = c.checkServiceRouting(t) }},
		{"EnvoyPodChecksThroughTheService", func(t *testing.T) { envoyIP = c.startEnvoyPod(t, svcIP) }},
		{"LimitsSharedThroughRedis", func(t *testing.T) { checkSharedLimit(t, svcIP) }},
		{"HPAReadsCPUFromMetricsServer", func(t *testing.T) { c.checkHPA(t) }},
		{"NetworkPolicyAppliedNotEnforced", func(t *testing.T) { c.checkNetworkPolicy(t) }},
		{"RollingUpdateUnderLoadNoFailures", func(t *testing.T) { c.checkRollingUpdate(t, svcIP, envoyIP) }},
		{"DrainHonoursPDB", func(t *testing.T) { c.checkDrain(t, svcIP, envoyIP) }},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.run) {
			t.Fatalf("%s failed; the later steps depend on it. Pods: %s", s.name, c.podsNow(ctx))
		}
	}
}

func (c *cluster) podsNow(ctx context.Context) string {
	pods, err := c.client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	return podSummary(pods.Items)
}

// checkProbesPassed: the pods are Ready by their gRPC probes, none
// restarted (a liveness failure or a crash would show).
func (c *cluster) checkProbesPassed(t *testing.T) {
	pods := c.appPods(t)
	for _, p := range pods {
		for _, cs := range p.Status.ContainerStatuses {
			if !cs.Ready || cs.RestartCount != 0 {
				t.Errorf("pod %s container %s: ready %v, %d restarts", p.Name, cs.Name, cs.Ready, cs.RestartCount)
			}
		}
		if p.Spec.Containers[0].ReadinessProbe.GRPC == nil {
			t.Errorf("pod %s: the readiness probe is not gRPC health", p.Name)
		}
	}
}

func (c *cluster) appPods(t *testing.T) []corev1.Pod {
	t.Helper()
	pods, err := c.client.CoreV1().Pods(namespace).List(t.Context(), metav1.ListOptions{LabelSelector: appSelector})
	if err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// checkServiceRouting: the EndpointSlice lists every pod ready; from the
// host, through the ClusterIP (kube-proxy's iptables rules), health
// SERVING and a Check allowed; each pod answers on its own address (so
// that the Service's picks can reach any of them).
func (c *cluster) checkServiceRouting(t *testing.T) string {
	svc, err := c.client.CoreV1().Services(namespace).Get(t.Context(), appName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ip := svc.Spec.ClusterIP
	// The EndpointSlice controller follows the pods' readiness shortly.
	var ready map[string]bool
	pods := c.appPods(t)
	err = poll(t.Context(), 30*time.Second, func() error {
		var err error
		if ready, err = c.readyEndpoints(t.Context()); err != nil {
			return err
		}
		for _, p := range pods {
			if !ready[p.Status.PodIP] {
				return fmt.Errorf("pod %s (%s) is not a ready endpoint of the Service: %v", p.Name, p.Status.PodIP, ready)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// kube-proxy programs the Service's rules shortly after. Until then a
	// connection to the ClusterIP leaves by the default route, and on this
	// kind of machine something out there answers it (HTTP/2, 404): each
	// try dials anew, so that no connection made before the rules stays.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err = poll(ctx, 30*time.Second, func() error {
		try, err := grpc.NewClient(serviceAddr(ip, 9001), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer try.Close()
		h, err := healthpb.NewHealthClient(try).Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		if h.Status != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("health %s", h.Status)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("health through the Service %s:9001: %v", ip, err)
	}
	conn := dial(t, serviceAddr(ip, 9001))
	resp, err := authv3.NewAuthorizationClient(conn).Check(ctx, checkRequest("routing", "/orders/1"))
	if err != nil || codes.Code(resp.GetStatus().GetCode()) != codes.OK {
		t.Fatalf("Check through the Service %s:9001: %v %v", ip, resp, err)
	}
	for _, p := range pods {
		pc := dial(t, serviceAddr(p.Status.PodIP, 9001))
		if _, err := healthpb.NewHealthClient(pc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Errorf("pod %s at %s: %v", p.Name, p.Status.PodIP, err)
		}
	}
	t.Logf("Service %s:9001 answers from the host; ready endpoints %v", ip, ready)
	return ip
}

// readyEndpoints are the addresses the Service's EndpointSlices list ready.
func (c *cluster) readyEndpoints(ctx context.Context) (map[string]bool, error) {
	slices, err := c.client.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + appName})
	if err != nil {
		return nil, err
	}
	ready := map[string]bool{}
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && *e.Conditions.Ready {
				ready[e.Addresses[0]] = true
			}
		}
	}
	return ready, nil
}

// checkSharedLimit: one tenant's calls over several connections (so over
// both pods) share the per-tenant limit through Redis: 200/s with a burst
// of 400 allows at most 400 + 200/s of elapsed time in all, whichever pod
// answers.
func checkSharedLimit(t *testing.T, ip string) {
	const calls, workers = 1200, 8
	start := time.Now()
	allowed, denied := 0, 0
	results := make(chan bool, calls)
	errs := make(chan error, calls)
	for w := range workers {
		client := authv3.NewAuthorizationClient(dial(t, serviceAddr(ip, 9001)))
		go func() {
			for i := w; i < calls; i += workers {
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				resp, err := client.Check(ctx, checkRequest("shared-limit", fmt.Sprintf("/orders/%d", i)))
				cancel()
				if err != nil {
					errs <- err
					continue
				}
				results <- codes.Code(resp.GetStatus().GetCode()) == codes.OK
			}
		}()
	}
	for range calls {
		select {
		case ok := <-results:
			if ok {
				allowed++
			} else {
				denied++
			}
		case err := <-errs:
			t.Fatalf("Check: %v", err)
		}
	}
	elapsed := time.Since(start)
	most := 400 + int(200*elapsed.Seconds()) + 1
	t.Logf("%d calls in %s: %d allowed (at most %d), %d denied", calls, elapsed.Round(time.Millisecond), allowed, most, denied)
	if allowed > most {
		t.Errorf("%d allowed, above the shared limit's %d: the pods do not share the counters", allowed, most)
	}
	if denied == 0 {
		t.Errorf("no call denied in %s: the per-tenant limit is not applied", elapsed)
	}
}

// checkHPA: the HPA's target is readable and it holds the floor; with no
// metrics API on this node (no metrics-server), it says it cannot read CPU.
func (c *cluster) checkHPA(t *testing.T) {
	var h *autoscalingv2.HorizontalPodAutoscaler
	// metrics-server's first scrape and the controller's next sync (5 s
	// here) come some seconds after the pods.
	err := poll(t.Context(), 3*time.Minute, func() error {
		var err error
		h, err = c.client.AutoscalingV2().HorizontalPodAutoscalers(namespace).Get(t.Context(), appName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if h.Status.CurrentReplicas != replicas || h.Status.DesiredReplicas != replicas {
			return fmt.Errorf("HPA: current %d desired %d replicas, want %d", h.Status.CurrentReplicas, h.Status.DesiredReplicas, replicas)
		}
		active := false
		for _, cond := range h.Status.Conditions {
			if cond.Type == autoscalingv2.ScalingActive {
				active = cond.Status == corev1.ConditionTrue
				if !active {
					return fmt.Errorf("HPA: ScalingActive=%s %s: %s", cond.Status, cond.Reason, cond.Message)
				}
			}
		}
		if !active {
			return fmt.Errorf("HPA: no ScalingActive condition yet: %v", h.Status.Conditions)
		}
		if cpuUtilization(h) == nil {
			return fmt.Errorf("HPA: no current CPU utilization yet: %v", h.Status.CurrentMetrics)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if h.Spec.ScaleTargetRef.Name != appName {
		t.Errorf("HPA: target %s, want %s", h.Spec.ScaleTargetRef.Name, appName)
	}
	target := h.Spec.Metrics[0].Resource
	t.Logf("HPA target: %s %s averageUtilization %d%%, replicas %d..%d; current CPU utilization %d%% (metrics-server)", h.Spec.ScaleTargetRef.Kind, h.Spec.ScaleTargetRef.Name,
		*target.Target.AverageUtilization, *h.Spec.MinReplicas, h.Spec.MaxReplicas, *cpuUtilization(h))
}

// cpuUtilization is the HPA's current average CPU utilization, nil when it
// has read none.
func cpuUtilization(h *autoscalingv2.HorizontalPodAutoscaler) *int32 {
	for _, m := range h.Status.CurrentMetrics {
		if m.Type == autoscalingv2.ResourceMetricSourceType && m.Resource != nil && m.Resource.Name == corev1.ResourceCPU {
			return m.Resource.Current.AverageUtilization
		}
	}
	return nil
}

// checkNetworkPolicy: the policy is applied (and strict-validated by the
// apply); the bridge CNI does NOT enforce NetworkPolicy, which a pod of an
// unlisted namespace shows by reaching the gRPC port it denies.
func (c *cluster) checkNetworkPolicy(t *testing.T) {
	np, err := c.client.NetworkingV1().NetworkPolicies(namespace).Get(t.Context(), appName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	podIP := c.appPods(t)[0].Status.PodIP
	const ns = "np-probe" // carries none of the labels the ingress rules admit
	if _, err := c.client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if err := c.waitServiceAccount(t.Context(), ns, "default"); err != nil {
		t.Fatal(err)
	}
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "connect"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "connect", Image: redisImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/%s/9001", podIP)},
			}},
		},
	}
	if _, err := c.client.CoreV1().Pods(ns).Create(t.Context(), probe, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var phase corev1.PodPhase
	err = poll(t.Context(), 2*time.Minute, func() error {
		p, err := c.client.CoreV1().Pods(ns).Get(t.Context(), probe.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		phase = p.Status.Phase
		if phase == corev1.PodSucceeded || phase == corev1.PodFailed {
			return nil
		}
		return fmt.Errorf("probe pod %s", phase)
	})
	if err != nil {
		t.Fatal(err)
	}
	if phase != corev1.PodSucceeded {
		t.Fatalf("a pod of namespace %s could not connect to %s:9001 (phase %s): is NetworkPolicy enforced now? update this test and docs/deploy.md", ns, podIP, phase)
	}
	t.Logf("NetworkPolicy %s applied (%d ingress, %d egress rules), and NOT enforced: the bridge CNI has no policy engine, so a pod of namespace %s reached %s:9001, which the policy denies. Enforcement needs a CNI that implements it (Calico, Cilium...).",
		np.Name, len(np.Spec.Ingress), len(np.Spec.Egress), ns, podIP)
	_ = c.client.CoreV1().Namespaces().Delete(t.Context(), ns, metav1.DeleteOptions{})
}

// checkRollingUpdate: a rollout restart of the Deployment while calls flow
// at a steady rate through the Service from the host and through the Envoy
// pod: not one may fail. Each old pod is removed from the endpoints when it
// starts terminating; its preStop sleep and drain delay keep it serving the
// connections that still reach it until kube-proxy's rules stop sending new
// ones, then GOAWAY moves them (Envoy's one among them) to the new pods.
func (c *cluster) checkRollingUpdate(t *testing.T, svcIP, envoyIP string) {
	if noDrain() {
		c.removeDrain(t)
	}
	loads := startLoads(t, svcIP, envoyIP)
	defer stopLoads(loads)
	time.Sleep(3 * time.Second) // a steady state before
	for _, l := range loads {
		if l.allowedSoFar() == 0 {
			t.Fatalf("%s: no call allowed in the first 3s: %s", l.name, firstLines(l.failed(), 5))
		}
	}
	counters, _ := envoyCounters(envoyIP)
	start := time.Now()
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, start.Format(time.RFC3339Nano))
	if _, err := c.client.AppsV1().Deployments(namespace).Patch(t.Context(), appName, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	err := c.waitRolledOut(t.Context(), appName, replicas, 5*time.Minute)
	rollout := time.Since(start)
	time.Sleep(3 * time.Second) // and after
	for _, l := range loads {
		t.Logf("rolling update (old pods gone) in %s; %s: %s", rollout.Round(100*time.Millisecond), l.name, l.finish())
	}
	logEnvoyCounters(t, envoyIP, counters)
	if err != nil {
		t.Fatalf("rollout: %v", err)
	}
	checkNoneFailed(t, loads, "the rolling update")
}

// removeDrain rolls the Deployment out without its preStop sleep and with
// no drain delay, before the measured rollout (whose old pods then have
// neither).
func (c *cluster) removeDrain(t *testing.T) {
	patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":%q,"lifecycle":null,"env":[{"name":"EXTAUTHZ_DRAIN_DELAY","value":"0s"}]}]}}}}`, appName)
	if _, err := c.client.AppsV1().Deployments(namespace).Patch(t.Context(), appName, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.waitRolledOut(t.Context(), appName, replicas, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Log("negative control: no preStop sleep, EXTAUTHZ_DRAIN_DELAY=0s")
}

// noDrain is the negative control (EXTAUTHZ_CLUSTER_NO_DRAIN=1): the pods
// lose the preStop sleep and the drain delay before the rolling update, and
// the rollout and the drain log their failed calls instead of failing, to
// show what the shipped values prevent (docs/deploy.md has the figures).
func noDrain() bool { return os.Getenv("EXTAUTHZ_CLUSTER_NO_DRAIN") == "1" }

func checkNoneFailed(t *testing.T, loads []*load, during string) {
	t.Helper()
	for _, l := range loads {
		f := l.failed()
		switch {
		case len(f) > 0 && noDrain():
			t.Logf("negative control: %s: %d calls failed during %s:%s", l.name, len(f), during, firstLines(f, 10))
		case len(f) > 0:
			t.Errorf("%s: %d calls failed during %s:%s", l.name, len(f), during, firstLines(f, 10))
		}
	}
}

// logEnvoyCounters logs how the Envoy pod's connections to extauthz moved:
// how many it opened, how many the server closed, failed to connect.
func logEnvoyCounters(t *testing.T, envoyIP string, before map[string]int) {
	t.Helper()
	after, err := envoyCounters(envoyIP)
	if err != nil || before == nil {
		t.Logf("Envoy pod counters: %v", err)
		return
	}
	t.Logf("Envoy pod, its connections to extauthz: %s", counterDelta(before, after))
}

// startLoads: the load of the rollout and the drain, through the Service
// (gRPC, the way sidecars call) and through the Envoy pod (HTTP).
func startLoads(t *testing.T, svcIP, envoyIP string) []*load {
	grpcLoad := startLoad(t, serviceAddr(svcIP, 9001), loadConns, loadRate)
	grpcLoad.name = "through the Service"
	httpLoad := startEnvoyLoad(envoyIP, loadConns, loadRate)
	httpLoad.name = "through the Envoy pod"
	return []*load{grpcLoad, httpLoad}
}

// stopLoads stops them on every way out of a step (a fatal one too).
func stopLoads(loads []*load) {
	for _, l := range loads {
		l.finish()
	}
}

// checkDrain drains the node as `kubectl drain` does (cordon, then the
// eviction API) under load: the first eviction is allowed, the second is
// refused while the first pod's replacement cannot run (the node is
// cordoned: maxUnavailable 1), and allowed once it is Ready again.
func (c *cluster) checkDrain(t *testing.T, svcIP, envoyIP string) {
	ctx := t.Context()
	counters, _ := envoyCounters(envoyIP)
	loads := startLoads(t, svcIP, envoyIP)
	defer stopLoads(loads)
	cordon := func(on bool) {
		patch := fmt.Sprintf(`{"spec":{"unschedulable":%v}}`, on)
		if _, err := c.client.CoreV1().Nodes().Patch(ctx, nodeName, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cordon(true)
	defer cordon(false)
	pods := c.appPods(t)
	evict := func(name string) error {
		return c.client.PolicyV1().Evictions(namespace).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}})
	}
	if err := poll(ctx, time.Minute, func() error { return evict(pods[0].Name) }); err != nil {
		t.Fatalf("evict %s: %v", pods[0].Name, err)
	}
	err := evict(pods[1].Name)
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("evict %s while %s is gone: %v, want 429 Too Many Requests (the PDB's maxUnavailable 1)", pods[1].Name, pods[0].Name, err)
	}
	t.Logf("second eviction refused, as the PodDisruptionBudget says: %v", err)
	// Still refused while the replacement is Pending on the cordoned node.
	time.Sleep(5 * time.Second)
	if err := evict(pods[1].Name); !apierrors.IsTooManyRequests(err) {
		t.Fatalf("evict %s with the replacement unschedulable: %v, want 429", pods[1].Name, err)
	}
	cordon(false)
	start := time.Now()
	if err := poll(ctx, 3*time.Minute, func() error { return evict(pods[1].Name) }); err != nil {
		t.Fatalf("evict %s after uncordon: %v", pods[1].Name, err)
	}
	t.Logf("second eviction allowed %s after the uncordon (the replacement Ready)", time.Since(start).Round(100*time.Millisecond))
	if err := c.waitRolledOut(ctx, appName, replicas, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, l := range loads {
		t.Logf("during the drain, %s: %s", l.name, l.finish())
	}
	logEnvoyCounters(t, envoyIP, counters)
	checkNoneFailed(t, loads, "the drain")
}
