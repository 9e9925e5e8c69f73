package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// metrics-server, built by scripts/test-deps.sh with its own manifests
// beside it, runs on the node so that the HPA reads CPU: the resource
// metrics API (metrics.k8s.io) through the API server's aggregation layer,
// from the kubelet's /metrics/resource.
const (
	metricsServerModule  = "sigs.k8s.io/metrics-server"
	metricsServerVersion = "v0.8.0"
	metricsServerImage   = "registry.k8s.io/metrics-server/metrics-server:" + metricsServerVersion
)

// metricsServerOverlay is metrics-server's own manifests/base with the
// image packed here and two changes for this node: the kubelet's serving
// certificate is the self-signed one it makes itself (no serving
// certificate bootstrap here), so --kubelet-insecure-tls, as its README
// says for such clusters; and a small CPU request.
const metricsServerOverlay = `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [%s]
images:
- name: gcr.io/k8s-staging-metrics-server/metrics-server
  newName: registry.k8s.io/metrics-server/metrics-server
  newTag: %s
patches:
- target: {kind: Deployment, name: metrics-server}
  patch: |-
    - op: add
      path: /spec/template/spec/containers/0/args/-
      value: --kubelet-insecure-tls
    - op: replace
      path: /spec/template/spec/containers/0/imagePullPolicy
      value: Never
    - op: replace
      path: /spec/template/spec/containers/0/resources/requests
      value: {cpu: 10m, memory: 64Mi}
`

// startMetricsServer applies metrics-server; it does not wait: its first
// scrape takes a resolution or two, and the HPA check waits for metrics.
func (c *cluster) startMetricsServer(ctx context.Context) error {
	dir := filepath.Join(c.dir, "metrics-server")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	base, err := filepath.Rel(dir, c.bins.metricsServerManifests)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), fmt.Appendf(nil, metricsServerOverlay, base, metricsServerVersion), 0o644); err != nil {
		return err
	}
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return fmt.Errorf("kustomize metrics-server: %w", err)
	}
	out, err := res.AsYaml()
	if err != nil {
		return err
	}
	objs, err := decodeYAML(out)
	if err != nil {
		return err
	}
	return c.apply(ctx, objs)
}
