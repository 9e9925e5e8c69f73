package k8s

import (
	"reflect"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// Names of components/object-storage, shared with docs/deploy.md.
const (
	replayPortName     = "http-replay"
	replaySecret       = "extauthz-replay"
	objectStorageCM    = "extauthz-object-storage"
	irsaAnnotation     = "eks.amazonaws.com/role-arn"
	replaySecretKey    = "secret"
	replayAddrVariable = "EXTAUTHZ_REPLAY_ADDR"
)

var roleARN = regexp.MustCompile(`^arn:aws:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]+$`)

// checkObjectStorage: with object storage, the replay endpoint's port is
// the one EXTAUTHZ_REPLAY_ADDR listens on, both Services expose it, the
// NetworkPolicy admits to it exactly the sources of the gRPC port (the
// Envoys re-route replays there), the replay secret is read from a Secret
// that is not in the render, the bucket from a ConfigMap that is, and the
// ServiceAccount names an IRSA role. Without it, none of that is set.
func checkObjectStorage(t *testing.T, objs []object, d *appsv1.Deployment, on bool) {
	t.Helper()
	c := extauthzContainer(t, d)
	_, bucketSet := envVarNamed(c, "EXTAUTHZ_BLOB_S3_BUCKET")
	if !on {
		if namedPort(c, replayPortName) != 0 || bucketSet {
			t.Errorf("object storage is set up (port %s or EXTAUTHZ_BLOB_S3_BUCKET) in a render that should not have it", replayPortName)
		}
		return
	}
	addr, ok := env(c, replayAddrVariable)
	want, err := addrPort(addr)
	if !ok || err != nil || namedPort(c, replayPortName) != want {
		t.Errorf("container port %s = %d, %s=%q (%v)", replayPortName, namedPort(c, replayPortName), replayAddrVariable, addr, err)
	}
	for _, name := range []string{appName, appName + "-headless"} {
		checkServiceExposes(t, named[*corev1.Service](t, objs, name), c, want)
	}
	checkReplaySources(t, named[*networkingv1.NetworkPolicy](t, objs, appName), c)
	checkReplaySecret(t, objs, c)
	checkBucketConfig(t, objs, c)
	sa := named[*corev1.ServiceAccount](t, objs, d.Spec.Template.Spec.ServiceAccountName)
	if arn := sa.Annotations[irsaAnnotation]; !roleARN.MatchString(arn) {
		t.Errorf("ServiceAccount %s: %s = %q, want an IAM role ARN (placeholder or real)", sa.Name, irsaAnnotation, arn)
	}
}

// envVarNamed returns the container's variable name, whatever its source.
func envVarNamed(c *corev1.Container, name string) (corev1.EnvVar, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e, true
		}
	}
	return corev1.EnvVar{}, false
}

// checkServiceExposes: s has an HTTP port reaching the container's port.
func checkServiceExposes(t *testing.T, s *corev1.Service, c *corev1.Container, port int32) {
	t.Helper()
	for _, p := range s.Spec.Ports {
		if containerPort(c, p.TargetPort) == port {
			if p.AppProtocol == nil || *p.AppProtocol != "http" {
				t.Errorf("service %s port %s: the replay endpoint is HTTP/1.1, want appProtocol http", s.Name, p.Name)
			}
			return
		}
	}
	t.Errorf("service %s does not expose the replay port %d", s.Name, port)
}

// checkReplaySources: the rules admitting to the replay port have the
// sources of the rules admitting to the gRPC port, no more, no fewer.
func checkReplaySources(t *testing.T, np *networkingv1.NetworkPolicy, c *corev1.Container) {
	t.Helper()
	sources := func(port int32) [][]networkingv1.NetworkPolicyPeer {
		var out [][]networkingv1.NetworkPolicyPeer
		for _, r := range np.Spec.Ingress {
			for _, p := range r.Ports {
				if p.Port != nil && containerPort(c, *p.Port) == port {
					out = append(out, r.From)
				}
			}
		}
		return out
	}
	grpc, replay := sources(namedPort(c, grpcPortName)), sources(namedPort(c, replayPortName))
	if len(replay) == 0 || !reflect.DeepEqual(grpc, replay) {
		t.Errorf("NetworkPolicy admits to the replay port %v, to the gRPC port %v; want the same Envoys", replay, grpc)
	}
}

// checkReplaySecret: EXTAUTHZ_REPLAY_SECRET is a reference to a Secret
// created out of band, never a value in git, and no EXTAUTHZ_ variable
// naming a secret has a literal value.
func checkReplaySecret(t *testing.T, objs []object, c *corev1.Container) {
	t.Helper()
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, envPrefix) && strings.Contains(e.Name, "SECRET") && e.ValueFrom == nil {
			t.Errorf("%s has a literal value; read it from a Secret", e.Name)
		}
	}
	e, _ := envVarNamed(c, "EXTAUTHZ_REPLAY_SECRET")
	ref := e.ValueFrom
	if ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != replaySecret || ref.SecretKeyRef.Key != replaySecretKey {
		t.Fatalf("EXTAUTHZ_REPLAY_SECRET = %+v, want secretKeyRef %s/%s", e, replaySecret, replaySecretKey)
	}
	if o := ref.SecretKeyRef.Optional; o != nil && *o {
		t.Error("EXTAUTHZ_REPLAY_SECRET is optional: without it each replica signs with its own key and replays fail across replicas")
	}
	for _, s := range only[*corev1.Secret](objs) {
		if strings.HasPrefix(s.Name, replaySecret) {
			t.Errorf("Secret %s is in git; production secrets are created out of band", s.Name)
		}
	}
}

// checkBucketConfig: the bucket and region come from the ConfigMap of the
// render, which has non-empty values for them.
func checkBucketConfig(t *testing.T, objs []object, c *corev1.Container) {
	t.Helper()
	for variable, key := range map[string]string{"EXTAUTHZ_BLOB_S3_BUCKET": "bucket", "EXTAUTHZ_BLOB_S3_REGION": "region"} {
		e, _ := envVarNamed(c, variable)
		if e.ValueFrom == nil || e.ValueFrom.ConfigMapKeyRef == nil {
			t.Errorf("%s is not read from ConfigMap %s", variable, objectStorageCM)
			continue
		}
		ref := e.ValueFrom.ConfigMapKeyRef
		var cm *corev1.ConfigMap
		for _, m := range only[*corev1.ConfigMap](objs) {
			if m.Name == ref.Name {
				cm = m
			}
		}
		switch {
		case !strings.HasPrefix(ref.Name, objectStorageCM) || cm == nil:
			t.Errorf("%s reads ConfigMap %q, which is not in the render", variable, ref.Name)
		case ref.Key != key || cm.Data[key] == "":
			t.Errorf("%s reads key %q of %s; want a non-empty %q", variable, ref.Key, ref.Name, key)
		}
	}
}
