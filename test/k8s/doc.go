// Package k8s checks the deployment artefacts: the Kubernetes manifests and
// Istio resources under k8s/, the kustomize renders of base and overlays,
// the Grafana dashboard, and a binary built with the Dockerfile's flags.
// Every render is also linted with kube-score (pinned; scripts/test-deps.sh
// installs it), with a short, reasoned allow-list.
//
// It is its own module so that the service's go.mod does not carry
// Kubernetes, Istio and kustomize. Run it with `cd test/k8s && go test ./...`.
package k8s
