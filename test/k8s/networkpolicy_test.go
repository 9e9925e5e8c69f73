package k8s

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// extauthzEgress is every destination port extauthz calls: the cluster DNS,
// Redis (a node or Cluster node, and Sentinels) and the OTLP collector
// (gRPC, HTTP); with object storage, S3 over HTTPS too.
var extauthzEgress = []string{"TCP/53", "UDP/53", "TCP/6379", "TCP/26379", "TCP/4317", "TCP/4318"}

const objectStorageEgress = "TCP/443"

// checkEgress: the extauthz pods are isolated for egress, each rule names
// its ports, the ports are exactly those extauthz calls, DNS goes only to
// the cluster DNS pods and, in dev, Redis only to the dev Redis pods.
func checkEgress(t *testing.T, objs []object, objStorage, devRedis bool) {
	t.Helper()
	np := named[*networkingv1.NetworkPolicy](t, objs, appName)
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
		t.Error("NetworkPolicy does not restrict egress")
	}
	want := slices.Clone(extauthzEgress)
	if objStorage {
		want = append(want, objectStorageEgress)
	}
	got := map[string]bool{}
	for i, r := range np.Spec.Egress {
		if len(r.Ports) == 0 {
			t.Errorf("egress rule %d allows every port", i)
		}
		for _, p := range r.Ports {
			k, err := egressPort(p)
			if err != nil {
				t.Errorf("egress rule %d: %v", i, err)
				continue
			}
			got[k] = true
			checkEgressPeers(t, objs, i, k, r.To, devRedis)
		}
	}
	slices.Sort(want)
	if have := slices.Sorted(maps.Keys(got)); !slices.Equal(have, want) {
		t.Errorf("egress ports %v, want exactly %v", have, want)
	}
}

// egressPort is "PROTOCOL/number"; a named or unset port is an error (a
// name would be resolved on the destination pods, which are not ours).
func egressPort(p networkingv1.NetworkPolicyPort) (string, error) {
	if p.Port == nil || p.Port.Type != intstr.Int || p.EndPort != nil {
		return "", fmt.Errorf("port %v: want one port number", p.Port)
	}
	proto := corev1.ProtocolTCP
	if p.Protocol != nil {
		proto = *p.Protocol
	}
	return fmt.Sprintf("%s/%d", proto, p.Port.IntVal), nil
}

// checkEgressPeers: DNS reaches only kube-system's kube-dns pods; in dev,
// Redis only the dev Redis pods (elsewhere the operator adds the `to`).
func checkEgressPeers(t *testing.T, objs []object, i int, port string, to []networkingv1.NetworkPolicyPeer, devRedis bool) {
	t.Helper()
	switch {
	case port == "TCP/53" || port == "UDP/53":
		dns := map[string]string{"k8s-app": "kube-dns"}
		ns := map[string]string{"kubernetes.io/metadata.name": "kube-system"}
		if len(to) == 0 {
			t.Errorf("egress rule %d: DNS to any destination, want the cluster DNS pods", i)
		}
		for _, peer := range to {
			if peer.IPBlock != nil || !selects(peer.NamespaceSelector, ns) || !selects(peer.PodSelector, dns) {
				t.Errorf("egress rule %d (%s): a peer is not kube-system's k8s-app=kube-dns pods", i, port)
			}
		}
	case devRedis && port == "TCP/6379":
		redis := named[*appsv1.Deployment](t, objs, "redis").Spec.Template.Labels
		if len(to) == 0 {
			t.Errorf("egress rule %d: Redis to any destination, want the dev Redis pods", i)
		}
		for _, peer := range to {
			if peer.NamespaceSelector != nil || peer.IPBlock != nil || !selects(peer.PodSelector, redis) {
				t.Errorf("egress rule %d (%s): a peer is not the dev Redis pods", i, port)
			}
		}
	}
}

// TestNoReplicasUnderHPA: no kustomization under k8s/ renders a Deployment
// that sets replicas while an HPA of the same render scales it; each apply
// would reset the scale the HPA chose (kube-score flags it too).
func TestNoReplicasUnderHPA(t *testing.T) {
	t.Parallel()
	hpas := 0
	for _, dir := range kustomizationDirs(t) {
		objs := renderObjects(t, dir)
		for _, h := range only[*autoscalingv2.HorizontalPodAutoscaler](objs) {
			hpas++
			ref := h.Spec.ScaleTargetRef
			if ref.Kind != "Deployment" {
				t.Errorf("%s: HPA %s scales a %s; extend this test", dir, h.Name, ref.Kind)
				continue
			}
			i := slices.IndexFunc(only[*appsv1.Deployment](objs), func(d *appsv1.Deployment) bool { return d.Name == ref.Name })
			switch {
			case i < 0:
				t.Errorf("%s: HPA %s targets Deployment %s, which the render lacks", dir, h.Name, ref.Name)
			case only[*appsv1.Deployment](objs)[i].Spec.Replicas != nil:
				t.Errorf("%s: Deployment %s sets replicas next to HPA %s", dir, ref.Name, h.Name)
			}
		}
	}
	if hpas == 0 {
		t.Error("no HPA in any render")
	}
}

// kustomizationDirs lists every directory under k8s/ whose kustomization
// builds on its own (components are built by the overlays that use them).
func kustomizationDirs(t *testing.T) []string {
	t.Helper()
	var dirs []string
	for _, f := range k8sFiles(t) {
		if isKustomization(f) && kustomizationFile(t, f).Kind != "Component" {
			dirs = append(dirs, filepath.Dir(f))
		}
	}
	slices.Sort(dirs)
	return dirs
}
