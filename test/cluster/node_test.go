package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// startContainerd runs this run's own containerd: its root, state, socket
// and runc root under the run's directory, so the Docker engine's
// containerd (and its images) are never touched. The CRI plugin's config is
// what this kind of machine needs:
//   - restrict_oom_score_adj: the VM lacks CAP_SYS_RESOURCE, and every
//     sandbox failed when the kubelet's OOM score (-998) was applied as is;
//   - the CNI plugins of scripts/test-deps.sh and the conflist written here;
//   - the sandbox image built here (pause/), never pulled;
//   - the pods' network namespaces under its state directory, not the
//     host's /var/run/netns.
func (c *cluster) startContainerd(ctx context.Context) error {
	d := filepath.Join(c.dir, "containerd")
	c.sock = filepath.Join(d, "containerd.sock")
	if err := c.writeCNIConfig(); err != nil {
		return err
	}
	config := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q

[grpc]
  address = %[3]q
[ttrpc]
  address = "%[3]s.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  restrict_oom_score_adj = true
  disable_apparmor = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %[6]q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[7]q
    conf_dir = %[8]q
    max_conf_num = 1
`, filepath.Join(d, "root"), filepath.Join(d, "state"), c.sock, filepath.Join(d, "opt"),
		pauseImage, filepath.Join(d, "runc"), c.bins.cniDir, filepath.Join(c.dir, "cni", "net.d"))
	cfgPath := filepath.Join(d, "config.toml")
	if err := os.MkdirAll(d, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(cfgPath, []byte(config), 0o644); err != nil {
		return err
	}
	p, err := c.start("containerd", c.bins.containerd, "--config", cfgPath)
	if err != nil {
		return err
	}
	return waitFor(ctx, p, time.Minute, func() error {
		_, err := c.ctr(ctx, "version")
		return err
	})
}

// writeCNIConfig: one bridge network, addresses from host-local (state in
// the run's directory), masquerade to the outside, hairpin (a pod reaching
// itself through its Service), portmap, and firewall: the Docker engine's
// FORWARD policy is DROP, and the firewall plugin's CNI-FORWARD chain admits
// the pods' traffic. containerd adds loopback itself.
func (c *cluster) writeCNIConfig() error {
	dir := filepath.Join(c.dir, "cni", "net.d")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	conf := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "extauthz-test",
  "plugins": [
    {"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}],
              "dataDir": %q}},
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "firewall", "backend": "iptables"}
  ]
}
`, bridgeName, podCIDR, filepath.Join(c.dir, "cni", "ipam"))
	return os.WriteFile(filepath.Join(dir, "10-extauthz-test.conflist"), []byte(conf), 0o644)
}

// ctr runs ctr against this run's containerd, in the CRI plugin's
// namespace.
func (c *cluster) ctr(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	args = append([]string{"--address", c.sock, "--namespace", "k8s.io"}, args...)
	out, err := exec.CommandContext(ctx, c.bins.ctr, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w: %s", strings.Join(args[4:], " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// startNode: the kubelet, registering itself, and kube-proxy in iptables
// mode.
func (c *cluster) startNode(ctx context.Context) error {
	kdir := filepath.Join(c.dir, "kubelet")
	if err := os.MkdirAll(kdir, 0o755); err != nil {
		return err
	}
	// failCgroupV1: this machine's cgroups are v1 (hybrid); the 1.35+
	// kubelet refuses them unless told. The kubelet API listens on a free
	// port on the node's address, for metrics-server, and asks the API
	// server who calls it (TokenReview) and whether they may
	// (SubjectAccessReview), as kubeadm sets it up; nobody else gets in. Image garbage collection is
	// off: the images were imported and cannot be pulled again. Eviction
	// thresholds are low: the disk is shared with other work.
	config := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://%s
address: 0.0.0.0
port: %s
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %s
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
authorization:
  mode: Webhook
failSwapOn: false
podLogsDir: %s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%%
  imagefs.available: 1%%
  nodefs.inodesFree: 1%%
serializeImagePulls: false
syncFrequency: 10s
clusterDNS: [%s]
clusterDomain: cluster.local
`, c.sock, freePort(), freePort(), filepath.Join(c.dir, "pod-logs"), dnsIP)
	cfgPath := filepath.Join(c.dir, "kubelet.yaml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o644); err != nil {
		return err
	}
	if _, err := c.start("kubelet", c.bins.kubelet,
		"--config="+cfgPath, "--kubeconfig="+filepath.Join(c.dir, "kubelet.kubeconfig"),
		"--root-dir="+kdir, "--hostname-override="+nodeName, "--node-ip="+hostIP().String(),
		"--cert-dir="+filepath.Join(kdir, "pki")); err != nil {
		return err
	}
	// --iptables-localhost-nodeports=false: kube-proxy would otherwise set
	// net.ipv4.conf.all.route_localnet; no NodePort is used here.
	// conntrack 0: leave the host's conntrack sysctls as they are.
	_, err := c.start("kube-proxy", c.bins.proxy,
		"--kubeconfig="+filepath.Join(c.dir, "kube-proxy.kubeconfig"),
		"--hostname-override="+nodeName, "--proxy-mode=iptables", "--cluster-cidr="+podCIDR,
		"--iptables-localhost-nodeports=false",
		"--conntrack-max-per-core=0", "--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0",
		"--metrics-bind-address=127.0.0.1:"+freePort(), "--healthz-bind-address=127.0.0.1:"+freePort())
	return err
}

// removePods stops and removes every pod sandbox through the CRI, so that
// containerd runs CNI DEL for each (addresses released, veths, portmap and
// firewall rules removed) before it stops.
func (c *cluster) removePods() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+c.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	list, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("CRI ListPodSandbox: %w", err)
	}
	var errs []string
	for _, sb := range list.Items {
		if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			errs = append(errs, fmt.Sprintf("stop %s: %v", sb.Metadata.GetName(), err))
		}
		if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			errs = append(errs, fmt.Sprintf("remove %s: %v", sb.Metadata.GetName(), err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("CRI: %s", strings.Join(errs, "; "))
	}
	return nil
}
