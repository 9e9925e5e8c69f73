// Package cluster runs k8s/ on a real single-node Kubernetes cluster: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, a kubelet on its
// own containerd, kube-proxy in iptables mode and the bridge CNI, started
// once per test run (TestMain) and torn down after, leaving the host as it
// was. scripts/test-deps.sh builds the Kubernetes commands and the CNI
// plugins from the Go module proxy and installs containerd from Debian; the
// images reach the node from the Docker engine (docker save, ctr import).
//
// It needs root (the kubelet mounts, the CNI plugins create links and
// iptables rules). Without a piece it skips, naming it; with CI=true it
// fails. Run it alone: `make test-cluster` (docs/testing.md).
package cluster
