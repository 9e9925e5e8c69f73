package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// The cluster DNS: CoreDNS, built by scripts/test-deps.sh, packed into an
// image here and run as the kube-dns Service, as kubeadm deploys it.
const (
	corednsModule  = "github.com/coredns/coredns"
	corednsVersion = "v1.14.7"
	corednsImage   = "registry.k8s.io/coredns/coredns:" + corednsVersion
	// dnsIP is the kube-dns Service's address, the kubelet's clusterDNS.
	dnsIP = "10.96.0.10"
)

// corednsYAML is kubeadm's CoreDNS add-on in short: its RBAC, a Corefile
// serving cluster.local from the API, and the Service at dnsIP. It
// listens on 53 as a non-root user: the pod sets the namespaced sysctl
// net.ipv4.ip_unprivileged_port_start, one of Kubernetes' safe sysctls
// (kubeadm's image carries a file capability instead). Other names get
// NXDOMAIN, not a refusal: the machine has no upstream, and a resolver
// walking the host's search domains (the kubelet appends them) must move
// on, not give up.
const corednsYAML = `apiVersion: v1
kind: ServiceAccount
metadata: {name: coredns, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:coredns"}
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}
subjects:
- {kind: ServiceAccount, name: coredns, namespace: kube-system}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: coredns, namespace: kube-system}
data:
  Corefile: |
    cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {
        errors
        health :8080
        ready :8181
        kubernetes cluster.local in-addr.arpa ip6.arpa {
            pods insecure
        }
        cache 30
        loadbalance
    }
    .:53 {
        template ANY ANY {
            rcode NXDOMAIN
        }
    }
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: coredns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  replicas: 1
  selector: {matchLabels: {k8s-app: kube-dns}}
  template:
    metadata: {labels: {k8s-app: kube-dns}}
    spec:
      serviceAccountName: coredns
      priorityClassName: system-cluster-critical
      dnsPolicy: Default
      securityContext:
        sysctls: [{name: net.ipv4.ip_unprivileged_port_start, value: "53"}]
      containers:
      - name: coredns
        image: %s
        imagePullPolicy: Never
        args: ["-conf", "/etc/coredns/Corefile"]
        ports:
        - {name: dns, containerPort: 53, protocol: UDP}
        - {name: dns-tcp, containerPort: 53, protocol: TCP}
        resources:
          requests: {cpu: 10m, memory: 32Mi}
          limits: {memory: 170Mi}
        readinessProbe:
          httpGet: {path: /ready, port: 8181}
          periodSeconds: 1
        livenessProbe:
          httpGet: {path: /health, port: 8080}
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          runAsNonRoot: true
          capabilities: {drop: [ALL]}
        volumeMounts:
        - {name: config, mountPath: /etc/coredns, readOnly: true}
      volumes:
      - name: config
        configMap: {name: coredns}
---
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  clusterIP: %s
  selector: {k8s-app: kube-dns}
  ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
`

// packedHostImages are the images made of the binaries
// scripts/test-deps.sh builds and installs: CoreDNS, Envoy Gateway's
// controller (which is also its proxies' shutdown manager), istiod, the
// Istio sidecar, the mesh test's workload, and metrics-server.
func (c *cluster) packedHostImages(ctx context.Context) ([]ociImage, error) {
	path := []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	proxy, err := c.istioProxyImage()
	if err != nil {
		return nil, err
	}
	meshapp := filepath.Join(c.dir, "meshapp")
	if err := goBuild(ctx, ".", meshapp, "./meshapp", "-s -w"); err != nil {
		return nil, err
	}
	return []ociImage{
		{name: corednsImage, entrypoint: []string{"/coredns"}, user: "65532:65532",
			files: []imageFile{{src: c.bins.coredns, dst: "/coredns", mode: 0o755}}},
		{name: envoyGatewayImage, entrypoint: []string{"/usr/local/bin/envoy-gateway"}, user: "65532:65532", env: path,
			files: []imageFile{{src: c.bins.envoyGateway, dst: "/usr/local/bin/envoy-gateway", mode: 0o755}}},
		{name: istiodImage, entrypoint: []string{"/usr/local/bin/pilot-discovery"}, user: "1337:1337", env: path,
			files: []imageFile{{src: c.bins.istiod, dst: "/usr/local/bin/pilot-discovery", mode: 0o755}}},
		proxy,
		{name: meshappImage, entrypoint: []string{"/meshapp"}, user: "65532:65532",
			files: []imageFile{{src: meshapp, dst: "/meshapp", mode: 0o755}}},
		{name: metricsServerImage, entrypoint: []string{"/metrics-server"}, user: "65532:65532",
			files: []imageFile{{src: c.bins.metricsServer, dst: "/metrics-server", mode: 0o755}}},
	}, nil
}

// importHostImages packs and imports packedHostImages.
func (c *cluster) importHostImages(ctx context.Context) error {
	images, err := c.packedHostImages(ctx)
	if err != nil {
		return err
	}
	for i, img := range images {
		archive := filepath.Join(c.dir, fmt.Sprintf("host-image-%d.tar", i))
		if err := img.write(archive); err != nil {
			return err
		}
		if _, err := c.ctr(ctx, "images", "import", archive); err != nil {
			return err
		}
	}
	return nil
}

// startDNS deploys CoreDNS and waits until it answers its readiness probe.
func (c *cluster) startDNS(ctx context.Context) error {
	objs, err := decodeYAML(fmt.Appendf(nil, corednsYAML, corednsImage, dnsIP))
	if err != nil {
		return err
	}
	if err := c.apply(ctx, objs); err != nil {
		return err
	}
	if err := c.waitRolledOutIn(ctx, "kube-system", "coredns", 1, 3*time.Minute); err != nil {
		return fmt.Errorf("CoreDNS: %w", err)
	}
	return nil
}

// dnsName is the cluster DNS name of a Service.
func dnsName(service, namespace string) string {
	return strings.Join([]string{service, namespace, "svc", "cluster", "local"}, ".")
}
