package cluster

import (
	"context"
	"crypto/rand"
	"debug/buildinfo"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// The pinned versions scripts/test-deps.sh builds (checked from each
// binary's Go build information: a stale build fails, it is not used).
const (
	kubeModule  = "k8s.io/kubernetes"
	kubeVersion = "v1.37.2"
	etcdModule  = "go.etcd.io/etcd/server/v3"
	etcdVersion = "v3.7.0"
	cniModule   = "github.com/containernetworking/plugins"
	cniVersion  = "v1.9.1"

	nodeName = "extauthz-node"
	// The pod network (the CNI bridge's) and the Service range: neither may
	// overlap the host's routes (checked at the start).
	podCIDR     = "10.244.0.0/24"
	serviceCIDR = "10.96.0.0/16"
	// The CNI bridge, created by the bridge plugin and deleted at teardown.
	bridgeName = "xa-cni0"
	// The sandbox image: built here (pause/), imported, never pulled.
	pauseImage = "registry.k8s.io/pause:3.10"

	// Cold: the image build compiles extauthz; a loaded machine is slow.
	setupTimeout = 25 * time.Minute
)

// cluster is the running single-node cluster and what its teardown must
// undo.
type cluster struct {
	root string // the repository
	dir  string // every file of the run: configs, data, logs, mounts
	bins binaries

	procs []*proc // in start order; stopped in reverse

	cfg    *rest.Config // cluster-admin
	client kubernetes.Interface
	sock   string // this run's containerd

	host *hostState // what was there before, restored at teardown
}

type binaries struct {
	etcd, apiserver, controllerManager, scheduler, kubelet, proxy string
	cniDir                                                        string
	containerd, ctr, runc                                         string
	coredns, envoyGateway                                         string
	envoyGatewayCRDs                                              string // a directory
	istiod, istioAgent, istioctl, istioBootstrap                  string
	metricsServer, metricsServerManifests                         string
}

// startCluster starts the whole cluster and returns it once the node is
// Ready and pods can be created. On an error the returned cluster (if any)
// holds what was started, for the caller's stop.
func startCluster(ctx context.Context) (*cluster, error) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return nil, err
	}
	c := &cluster{root: root}
	if err := c.findBinaries(); err != nil {
		return nil, err
	}
	if err := checkHost(); err != nil {
		return nil, err
	}
	// The images build while the control plane starts.
	images := make(chan imageResult, 1)
	go func() { images <- buildImages(ctx, root) }()

	if c.dir, err = os.MkdirTemp("", "extauthz-cluster-"); err != nil {
		return nil, err
	}
	if c.host, err = snapshotHost(); err != nil {
		return c, err
	}
	if err := c.startControlPlane(ctx); err != nil {
		return c, err
	}
	if err := c.startContainerd(ctx); err != nil {
		return c, err
	}
	if err := c.importPause(ctx); err != nil {
		return c, err
	}
	if err := c.startNode(ctx); err != nil {
		return c, err
	}
	if err := c.waitReady(ctx); err != nil {
		return c, err
	}
	if err := c.importHostImages(ctx); err != nil {
		return c, err
	}
	if err := c.startMetricsServer(ctx); err != nil {
		return c, err
	}
	if err := c.startDNS(ctx); err != nil {
		return c, err
	}
	res := <-images
	if res.err != nil {
		return c, res.err
	}
	return c, c.importImages(ctx, res)
}

func (c *cluster) findBinaries() error {
	cache := filepath.Join(c.root, ".cache")
	kubeDir := envOr("KUBE_NODE_DIR", filepath.Join(cache, "kube-node-"+kubeVersion))
	apiDir := filepath.Join(cache, "kube-apiserver-"+kubeVersion)
	b := &c.bins
	b.etcd = envOr("ETCD_BIN", filepath.Join(apiDir, "etcd"))
	b.apiserver = envOr("KUBE_APISERVER_BIN", filepath.Join(apiDir, "kube-apiserver"))
	b.controllerManager = filepath.Join(kubeDir, "kube-controller-manager")
	b.scheduler = filepath.Join(kubeDir, "kube-scheduler")
	b.kubelet = filepath.Join(kubeDir, "kubelet")
	b.proxy = filepath.Join(kubeDir, "kube-proxy")
	b.cniDir = envOr("CNI_DIR", filepath.Join(cache, "cni-plugins-"+cniVersion))
	var problems []string
	check := func(bin, module, version string) {
		if err := builtFrom(bin, module, version); err != nil {
			problems = append(problems, err.Error())
		}
	}
	check(b.etcd, etcdModule, etcdVersion)
	for _, bin := range []string{b.apiserver, b.controllerManager, b.scheduler, b.kubelet, b.proxy} {
		check(bin, kubeModule, kubeVersion)
	}
	b.coredns = envOr("COREDNS_BIN", filepath.Join(envOr("COREDNS_DIR", filepath.Join(cache, "coredns-"+corednsVersion)), "coredns"))
	check(b.coredns, corednsModule, corednsVersion)
	b.envoyGateway = envOr("ENVOY_GATEWAY_BIN", filepath.Join(cache, "envoy-gateway-"+envoyGatewayVersion, "envoy-gateway"))
	check(b.envoyGateway, envoyGatewayModule, envoyGatewayVersion)
	b.envoyGatewayCRDs = filepath.Join(filepath.Dir(b.envoyGateway), "crds")
	if _, err := os.Stat(filepath.Join(b.envoyGatewayCRDs, "gatewayapi-crds.yaml")); err != nil {
		problems = append(problems, "Envoy Gateway's CRDs beside its binary: "+err.Error())
	}
	msDir := envOr("METRICS_SERVER_DIR", filepath.Join(cache, "metrics-server-"+metricsServerVersion))
	b.metricsServer = filepath.Join(msDir, "metrics-server")
	check(b.metricsServer, metricsServerModule, metricsServerVersion)
	b.metricsServerManifests = filepath.Join(msDir, "manifests", "base")
	if _, err := os.Stat(filepath.Join(b.metricsServerManifests, "kustomization.yaml")); err != nil {
		problems = append(problems, "metrics-server's manifests: "+err.Error())
	}
	istioDir := envOr("ISTIO_DIR", filepath.Join(cache, "istio-"+istioVersion))
	b.istiod, b.istioAgent, b.istioctl = filepath.Join(istioDir, "pilot-discovery"), filepath.Join(istioDir, "pilot-agent"), filepath.Join(istioDir, "istioctl")
	for _, bin := range []string{b.istiod, b.istioAgent, b.istioctl} {
		check(bin, istioModule, istioVersion)
	}
	b.istioBootstrap = filepath.Join(istioDir, "envoy_bootstrap.json")
	if _, err := os.Stat(b.istioBootstrap); err != nil {
		problems = append(problems, "Istio's Envoy bootstrap template: "+err.Error())
	}
	for _, p := range []string{"bridge", "host-local", "loopback", "portmap", "firewall"} {
		check(filepath.Join(b.cniDir, p), cniModule, cniVersion)
	}
	for name, dst := range map[string]*string{"containerd": &b.containerd, "ctr": &b.ctr, "runc": &b.runc} {
		p, err := exec.LookPath(name)
		if err != nil {
			problems = append(problems, name+" is not installed (Debian package "+map[string]string{"ctr": "containerd"}[name]+name+")")
		}
		*dst = p
	}
	for _, tool := range []string{"iptables", "ip6tables", "iptables-save", "conntrack", "ip", "docker"} {
		if _, err := exec.LookPath(tool); err != nil {
			problems = append(problems, tool+" is not installed")
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s (scripts/test-deps.sh builds and installs them)", errMissing, strings.Join(problems, "; "))
	}
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// builtFrom checks that bin exists and was built from module at version.
func builtFrom(bin, module, version string) error {
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("%s: not built", bin)
	}
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return fmt.Errorf("%s: %v", bin, err)
	}
	got := ""
	if info.Main.Path == module {
		got = info.Main.Version
	}
	for _, d := range info.Deps {
		if d.Path == module {
			got = d.Version
		}
	}
	if got != version {
		return fmt.Errorf("%s is built from %s@%q, want %s", bin, module, got, version)
	}
	return nil
}

// checkHost: root (mounts, links, iptables), no route overlapping the
// cluster's ranges, no bridge of an earlier run. (The Docker engine is
// checked where the images are built.)
func checkHost() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: root (the kubelet mounts volumes, the CNI plugins create links and iptables rules)", errMissing)
	}
	out, err := exec.Command("ip", "-4", "route", "show").Output()
	if err != nil {
		return err
	}
	_, pods, _ := net.ParseCIDR(podCIDR)
	_, svcs, _ := net.ParseCIDR(serviceCIDR)
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] == "default" {
			continue
		}
		if _, n, err := net.ParseCIDR(f[0]); err == nil && (n.Contains(pods.IP) || pods.Contains(n.IP) || n.Contains(svcs.IP) || svcs.Contains(n.IP)) {
			return fmt.Errorf("the host route %q overlaps the cluster's %s or %s", line, podCIDR, serviceCIDR)
		}
	}
	if _, err := net.InterfaceByName(bridgeName); err == nil {
		return fmt.Errorf("the link %s exists already (another run, or a teardown that failed): ip link del %s", bridgeName, bridgeName)
	}
	return nil
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// startControlPlane: etcd, kube-apiserver with Node,RBAC authorization and
// a service-account signing key, the admin client.
func (c *cluster) startControlPlane(ctx context.Context) error {
	pki := filepath.Join(c.dir, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return err
	}
	caPEM, err := writeServingCert(pki, hostIP())
	if err != nil {
		return err
	}
	if _, err := writeKey(filepath.Join(pki, "sa.key")); err != nil {
		return err
	}
	if err := writeFrontProxy(pki); err != nil {
		return err
	}
	// One static token per identity: what each component is authorized to
	// do is the default RBAC bootstrap policy's (and the Node authorizer's
	// for the kubelet), as in a real cluster.
	identities := []struct{ name, user, groups string }{
		{"admin", "admin", "system:masters"},
		{"kubelet", "system:node:" + nodeName, "system:nodes"},
		{"controller-manager", "system:kube-controller-manager", ""},
		{"scheduler", "system:kube-scheduler", ""},
		{"kube-proxy", "system:kube-proxy", ""},
	}
	var tokens strings.Builder
	etcdURL := "http://" + freeAddr()
	apiAddr := freeAddr()
	server := "https://" + apiAddr
	for _, id := range identities {
		token := rand.Text()
		fmt.Fprintf(&tokens, "%s,%s,%s-uid,%q\n", token, id.user, id.name, id.groups)
		if err := writeKubeconfig(filepath.Join(c.dir, id.name+".kubeconfig"), server, caPEM, token); err != nil {
			return err
		}
		if id.name == "admin" {
			c.cfg = &rest.Config{Host: server, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}, QPS: -1}
		}
	}
	if err := os.WriteFile(filepath.Join(pki, "tokens.csv"), []byte(tokens.String()), 0o600); err != nil {
		return err
	}
	peer := "http://" + freeAddr()
	etcd, err := c.start("etcd", c.bins.etcd,
		"--name=node", "--data-dir="+filepath.Join(c.dir, "etcd"), "--log-level=warn",
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer,
		"--initial-cluster=node="+peer,
		"--unsafe-no-fsync") // a throwaway store: durability buys nothing here
	if err != nil {
		return err
	}
	if err := waitFor(ctx, etcd, time.Minute, func() error { return httpOK(http.DefaultClient, etcdURL+"/health") }); err != nil {
		return err
	}
	// The API server listens on every address and advertises the node's:
	// the kubernetes Service then routes to it, and pods (CoreDNS, Envoy
	// Gateway's controller) reach it as in any cluster. The clients here
	// use loopback.
	_, port, _ := net.SplitHostPort(apiAddr)
	api, err := c.start("kube-apiserver", c.bins.apiserver,
		"--etcd-servers="+etcdURL, "--bind-address=0.0.0.0", "--secure-port="+port,
		"--advertise-address="+hostIP().String(),
		"--tls-cert-file="+filepath.Join(pki, "tls.crt"), "--tls-private-key-file="+filepath.Join(pki, "tls.key"),
		"--client-ca-file="+filepath.Join(pki, "tls.crt"),
		"--cert-dir="+pki, "--token-auth-file="+filepath.Join(pki, "tokens.csv"),
		"--authorization-mode=Node,RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+filepath.Join(pki, "sa.key"),
		"--service-account-signing-key-file="+filepath.Join(pki, "sa.key"),
		"--service-cluster-ip-range="+serviceCIDR,
		// The aggregation layer, for metrics-server's metrics.k8s.io.
		"--requestheader-client-ca-file="+filepath.Join(pki, "front-proxy-ca.crt"),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file="+filepath.Join(pki, "front-proxy-client.crt"),
		"--proxy-client-key-file="+filepath.Join(pki, "front-proxy-client.key"),
		"--enable-aggregator-routing=true")
	if err != nil {
		return err
	}
	probe, err := rest.HTTPClientFor(c.cfg)
	if err != nil {
		return err
	}
	if err := waitFor(ctx, api, 5*time.Minute, func() error { return httpOK(probe, server+"/readyz") }); err != nil {
		return err
	}
	c.client, err = kubernetes.NewForConfig(c.cfg)
	if err != nil {
		return err
	}
	// The controllers and the scheduler sign in with their own tokens.
	kc := func(name string) string { return "--kubeconfig=" + filepath.Join(c.dir, name+".kubeconfig") }
	if _, err := c.start("kube-controller-manager", c.bins.controllerManager, kc("controller-manager"),
		"--leader-elect=false", "--secure-port=0", "--cluster-name=extauthz-test",
		"--service-account-private-key-file="+filepath.Join(pki, "sa.key"),
		"--root-ca-file="+filepath.Join(pki, "tls.crt"),
		"--use-service-account-credentials=true",
		"--service-cluster-ip-range="+serviceCIDR,
		// The HPA asks the metrics API every 15s by default; there is none.
		"--horizontal-pod-autoscaler-sync-period=5s"); err != nil {
		return err
	}
	_, err = c.start("kube-scheduler", c.bins.scheduler, kc("scheduler"), "--leader-elect=false", "--secure-port=0")
	return err
}

func httpOK(client *http.Client, url string) error {
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// hostIP is the address of the interface of the default route: the node's
// InternalIP, which the kubelet picks the same way.
func hostIP() net.IP {
	conn, err := net.Dial("udp", "192.0.2.255:9") // no packet is sent
	if err != nil {
		return nil
	}
	defer conn.Close()
	return conn.LocalAddr().(*net.UDPAddr).IP
}

func writeKubeconfig(path, server string, ca []byte, token string) error {
	return os.WriteFile(path, fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: test
  user:
    token: %s
contexts:
- name: test
  context: {cluster: test, user: test}
current-context: test
`, server, base64.StdEncoding.EncodeToString(ca), token), 0o600)
}

// waitReady waits for the node to be Ready and for the default service
// account (pods created before it exists are refused).
func (c *cluster) waitReady(ctx context.Context) error {
	err := waitFor(ctx, c.proc("kubelet"), 5*time.Minute, func() error {
		n, err := c.client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				if cond.Status == corev1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("node %s: Ready=%s: %s", nodeName, cond.Status, cond.Message)
			}
		}
		return fmt.Errorf("node %s: no Ready condition yet", nodeName)
	})
	if err != nil {
		return err
	}
	return c.waitServiceAccount(ctx, "default", "default")
}

func (c *cluster) waitServiceAccount(ctx context.Context, ns, name string) error {
	return poll(ctx, 2*time.Minute, func() error {
		_, err := c.client.CoreV1().ServiceAccounts(ns).Get(ctx, name, metav1.GetOptions{})
		return err
	})
}

// poll calls f until it returns nil or timeout passes, returning its last
// error then.
func poll(ctx context.Context, timeout time.Duration, f func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		err := f()
		var exited processExited
		if err == nil || errors.As(err, &exited) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("after %s: %w", timeout, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// waitFor polls ready like poll, and stops early when p exits.
func waitFor(ctx context.Context, p *proc, timeout time.Duration, ready func() error) error {
	return poll(ctx, timeout, func() error {
		if p.exited() {
			return processExited{fmt.Errorf("%s exited before it was ready: %s (log: %s)", p.name, p.exitErr(), p.log)}
		}
		return ready()
	})
}

// processExited ends a poll at once: waiting longer cannot help.
type processExited struct{ error }

// proc is a child process whose output goes to a log file in the run's
// directory, printed when the run fails.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	mu   sync.Mutex
	err  error
}

func (c *cluster) start(name, bin string, args ...string) (*proc, error) {
	logDir := filepath.Join(c.dir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	p := &proc{name: name, log: filepath.Join(logDir, name+".log"), done: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(bin, args...)
	// etcd reads ETCD_* variables as flags: ETCD_BIN is none of them.
	p.cmd.Env = filterEnv(os.Environ(), "ETCD_BIN")
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c.procs = append(c.procs, p)
	go func() {
		err := p.cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

func filterEnv(env []string, drop string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, drop+"=") {
			out = append(out, kv)
		}
	}
	return out
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) exitErr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		return "exit status 0"
	}
	return p.err.Error()
}

// terminate sends SIGTERM, then SIGKILL after grace.
func (p *proc) terminate(grace time.Duration) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// dumpLogs prints the end of every component's log.
func (c *cluster) dumpLogs() {
	for _, p := range c.procs {
		b, _ := os.ReadFile(p.log)
		if len(b) > 6<<10 {
			b = b[len(b)-6<<10:]
		}
		fmt.Fprintf(os.Stderr, "----- %s (%s, last 6 KiB) -----\n%s\n", p.name, p.log, b)
	}
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func freePort() string {
	_, port, _ := net.SplitHostPort(freeAddr())
	return port
}
