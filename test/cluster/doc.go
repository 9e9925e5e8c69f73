// Package cluster runs k8s/ on a real single-node Kubernetes cluster: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, a kubelet on its
// own containerd, kube-proxy in iptables mode, the bridge CNI and CoreDNS,
// started once per test run (TestMain) and torn down after, leaving the
// host as it was. On it, TestK8sOnANode applies k8s/,
// TestIstioMeshOnANode runs istiod and sidecars with k8s/istio, and
// TestEnvoyGatewayDrivesExtauthzOnANode installs Envoy Gateway with our
// image as its rate limit Deployment. scripts/test-deps.sh builds the
// Kubernetes commands, the CNI plugins, CoreDNS, Istio and Envoy Gateway
// from the Go module proxy and installs containerd from Debian; the images
// reach the node from the Docker engine (docker save, ctr import) or are
// packed from host binaries.
//
// It needs root (the kubelet mounts, the CNI plugins create links and
// iptables rules). Without a piece it skips, naming it; with CI=true it
// fails. Run it alone: `make test-cluster` (docs/testing.md).
package cluster
