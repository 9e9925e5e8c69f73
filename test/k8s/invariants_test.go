package k8s

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const (
	appName         = "extauthz"
	grpcPortName    = "grpc"
	policyConfigMap = "extauthz-policy"
	redisSecret     = "extauthz-redis"
)

// selects reports whether sel selects a pod with these labels; an empty or
// invalid selector selects nothing here (we never want "everything").
func selects(sel *metav1.LabelSelector, podLabels map[string]string) bool {
	if sel == nil || (len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 0) {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && s.Matches(labels.Set(podLabels))
}

// checkPodSecurity asserts what a security review asks of every pod we ship:
// non-root, read-only root filesystem, no privilege escalation, all
// capabilities dropped, seccomp RuntimeDefault, requests and limits (CPU,
// memory and ephemeral storage).
func checkPodSecurity(t *testing.T, where string, spec *corev1.PodSpec) {
	t.Helper()
	psc := spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		t.Errorf("%s: uses host namespaces", where)
	}
	for _, c := range append(slicesClone(spec.InitContainers), spec.Containers...) {
		w := where + " container " + c.Name
		sc := c.SecurityContext
		if sc == nil {
			t.Errorf("%s: no securityContext", w)
			continue
		}
		if !isTrue(sc.RunAsNonRoot) && !isTrue(psc.RunAsNonRoot) {
			t.Errorf("%s: runAsNonRoot is not true", w)
		}
		if uid := firstInt64(sc.RunAsUser, psc.RunAsUser); uid == nil || *uid == 0 {
			t.Errorf("%s: no numeric non-root runAsUser", w)
		}
		if !isTrue(sc.ReadOnlyRootFilesystem) {
			t.Errorf("%s: readOnlyRootFilesystem is not true", w)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: allowPrivilegeEscalation is not false", w)
		}
		if isTrue(sc.Privileged) {
			t.Errorf("%s: privileged", w)
		}
		if sc.Capabilities == nil || !containsCap(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
			t.Errorf("%s: capabilities must drop ALL and add none", w)
		}
		if !seccompRuntimeDefault(sc.SeccompProfile, psc.SeccompProfile) {
			t.Errorf("%s: seccomp profile is not RuntimeDefault", w)
		}
		checkResources(t, w, c.Resources)
	}
}

func checkResources(t *testing.T, where string, r corev1.ResourceRequirements) {
	t.Helper()
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
		req, okReq := r.Requests[name]
		lim, okLim := r.Limits[name]
		switch {
		case !okReq || !okLim:
			t.Errorf("%s: %s needs both a request and a limit", where, name)
		case req.Cmp(lim) > 0:
			t.Errorf("%s: %s request %s exceeds limit %s", where, name, req.String(), lim.String())
		}
	}
}

func seccompRuntimeDefault(container, pod *corev1.SeccompProfile) bool {
	p := container
	if p == nil {
		p = pod
	}
	return p != nil && p.Type == corev1.SeccompProfileTypeRuntimeDefault
}

func containsCap(caps []corev1.Capability, want corev1.Capability) bool {
	for _, c := range caps {
		if c == want {
			return true
		}
	}
	return false
}

func isTrue(b *bool) bool { return b != nil && *b }

func firstInt64(vs ...*int64) *int64 {
	for _, v := range vs {
		if v != nil {
			return v
		}
	}
	return nil
}

func slicesClone[T any](s []T) []T { return append([]T(nil), s...) }

// containerPort resolves a Service targetPort or NetworkPolicy port, by name
// or number, to a port of the container; 0 when none matches.
func containerPort(c *corev1.Container, p intstr.IntOrString) int32 {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return cp.ContainerPort
		}
	}
	return 0
}

func namedPort(c *corev1.Container, name string) int32 {
	return containerPort(c, intstr.FromString(name))
}

// env returns the container's literal value of an environment variable
// (ok false when unset or taken from a reference).
func env(c *corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom == nil {
			return e.Value, true
		}
	}
	return "", false
}

// setting is the value the binary will see: the manifest's, else the
// Config default parsed from cmd/extauthz.
func setting(t *testing.T, vars map[string]envVar, c *corev1.Container, name string) string {
	t.Helper()
	if v, ok := env(c, name); ok {
		return v
	}
	v, ok := vars[name]
	if !ok {
		t.Fatalf("%s is not a Config field", name)
	}
	return v.Default
}

// addrPort is the port of a listen address such as ":9001".
func addrPort(addr string) (int32, error) {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(p, 10, 32)
	return int32(n), err
}

func extauthzContainer(t *testing.T, d *appsv1.Deployment) *corev1.Container {
	t.Helper()
	for i := range d.Spec.Template.Spec.Containers {
		if c := &d.Spec.Template.Spec.Containers[i]; c.Name == appName {
			return c
		}
	}
	t.Fatalf("deployment %s has no container %q", d.Name, appName)
	return nil
}

// checkEnv asserts every EXTAUTHZ_ variable of every container is a field
// of the binary's Config and that its literal value parses as that type.
func checkEnv(t *testing.T, where string, spec *corev1.PodSpec, vars map[string]envVar) {
	t.Helper()
	for _, c := range spec.Containers {
		seen := map[string]bool{}
		for _, e := range c.Env {
			if seen[e.Name] {
				t.Errorf("%s container %s: %s set twice", where, c.Name, e.Name)
			}
			seen[e.Name] = true
			if !strings.HasPrefix(e.Name, envPrefix) {
				continue
			}
			v, ok := vars[e.Name]
			if !ok {
				t.Errorf("%s container %s: %s is not read by the binary (not a field of cmd/extauthz Config)", where, c.Name, e.Name)
				continue
			}
			if e.ValueFrom == nil {
				if err := v.checkValue(e.Value); err != nil {
					t.Errorf("%s container %s: %s=%q is not a valid %s: %v", where, c.Name, e.Name, e.Value, v.Type, err)
				}
			}
		}
		for _, ef := range c.EnvFrom {
			t.Errorf("%s container %s: envFrom %v hides which variables are set; list them", where, c.Name, ef)
		}
	}
}

// duration is a duration setting of the binary as the container sets it
// (else the Config default).
func duration(t *testing.T, vars map[string]envVar, c *corev1.Container, name string) time.Duration {
	t.Helper()
	raw := setting(t, vars, c, name)
	d, err := time.ParseDuration(raw)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, raw, err)
	}
	return d
}

// preStop is the container's preStop sleep (0 without one).
func preStop(t *testing.T, c *corev1.Container) time.Duration {
	t.Helper()
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
		return 0
	}
	if h := c.Lifecycle.PreStop; h.Sleep != nil {
		return time.Duration(h.Sleep.Seconds) * time.Second
	}
	t.Errorf("container %s: preStop must be a sleep (the image has no shell)", c.Name)
	return 0
}

// drainBudget is how long a pod may take to stop: the preStop sleep, then
// after SIGTERM the binary's drain delay (serving, NOT_SERVING) and its
// shutdown timeout (in-flight calls).
func drainBudget(t *testing.T, vars map[string]envVar, c *corev1.Container) time.Duration {
	t.Helper()
	return preStop(t, c) + duration(t, vars, c, "EXTAUTHZ_DRAIN_DELAY") + duration(t, vars, c, "EXTAUTHZ_SHUTDOWN_TIMEOUT")
}

func fmtLabels(m map[string]string) string { return fmt.Sprint(labels.Set(m)) }
