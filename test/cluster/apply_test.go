package cluster

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

const (
	namespace = "extauthz"
	appName   = "extauthz"
)

// appSelector selects the extauthz server pods (the Deployment's selector).
var appSelector = labels.Set{"app.kubernetes.io/name": "extauthz", "app.kubernetes.io/component": "server"}.String()

// render builds a kustomization in process, as `kubectl apply -k` would.
func render(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize %s: %v", dir, err)
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeYAML(out)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// applyAll server-side applies objs (Namespaces first), with strict field
// validation.
func (c *cluster) applyAll(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	if err := c.apply(t.Context(), objs); err != nil {
		t.Fatal(err)
	}
}

// apply is applyAll for the cluster's own start (no test yet).
func (c *cluster) apply(ctx context.Context, objs []*unstructured.Unstructured) error {
	dyn, err := dynamic.NewForConfig(c.cfg)
	if err != nil {
		return err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(c.cfg)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	ordered := append([]*unstructured.Unstructured{}, objs...)
	// Namespaces first, then the rest as rendered.
	for i, o := range ordered {
		if o.GetKind() == "Namespace" {
			ordered[0], ordered[i] = ordered[i], ordered[0]
		}
	}
	for _, o := range ordered {
		gvk := o.GroupVersionKind()
		var m *meta.RESTMapping
		// A kind whose CRD was applied just before is served once the CRD
		// is Established: discover again until then.
		err := poll(ctx, 30*time.Second, func() error {
			var err error
			if m, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
				mapper.Reset()
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("%s %s: %w", gvk.Kind, o.GetName(), err)
		}
		var res dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			res = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
		}
		data, err := o.MarshalJSON()
		if err != nil {
			return err
		}
		force := true
		if _, err := res.Patch(ctx, o.GetName(), types.ApplyPatchType, data,
			metav1.PatchOptions{FieldManager: "extauthz-cluster-test", Force: &force, FieldValidation: "Strict"}); err != nil {
			return fmt.Errorf("apply %s %s/%s: %w", gvk.Kind, o.GetNamespace(), o.GetName(), err)
		}
		if o.GetKind() == "Namespace" {
			// Pods of a namespace are refused until its default service
			// account exists.
			if err := c.waitServiceAccount(ctx, o.GetName(), "default"); err != nil {
				return err
			}
		}
	}
	return nil
}

// decodeYAML splits a multi-document YAML stream into objects.
func decodeYAML(b []byte) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	for _, doc := range bytes.Split(append([]byte("\n"), b...), []byte("\n---")) {
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, err
		}
		if s := strings.TrimSpace(string(j)); s == "null" || s == "{}" {
			continue
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(j); err != nil {
			return nil, err
		}
		objs = append(objs, o)
	}
	return objs, nil
}

// waitRolledOut waits until the Deployment has want replicas, all updated,
// ready and available, and no pod of an older revision is left (not even
// terminating).
func (c *cluster) waitRolledOut(ctx context.Context, name string, want int32, timeout time.Duration) error {
	return c.waitRolledOutIn(ctx, namespace, name, want, timeout)
}

func (c *cluster) waitRolledOutIn(ctx context.Context, namespace, name string, want int32, timeout time.Duration) error {
	return poll(ctx, timeout, func() error {
		d, err := c.client.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := rolledOut(d, want); err != nil {
			return err
		}
		sel := metav1.FormatLabelSelector(d.Spec.Selector)
		pods, err := c.client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return err
		}
		if int32(len(pods.Items)) != want {
			return fmt.Errorf("deployment %s: %d pods, want %d (%s)", name, len(pods.Items), want, podSummary(pods.Items))
		}
		return nil
	})
}

func rolledOut(d *appsv1.Deployment, want int32) error {
	s := d.Status
	switch {
	case d.Spec.Replicas == nil || *d.Spec.Replicas != want:
		return fmt.Errorf("deployment %s: spec.replicas %v, want %d", d.Name, d.Spec.Replicas, want)
	case s.ObservedGeneration < d.Generation:
		return fmt.Errorf("deployment %s: generation %d not observed yet", d.Name, d.Generation)
	case s.Replicas != want || s.UpdatedReplicas != want || s.ReadyReplicas != want || s.AvailableReplicas != want:
		return fmt.Errorf("deployment %s: replicas %d updated %d ready %d available %d, want %d",
			d.Name, s.Replicas, s.UpdatedReplicas, s.ReadyReplicas, s.AvailableReplicas, want)
	}
	return nil
}

func podSummary(pods []corev1.Pod) string {
	var parts []string
	for _, p := range pods {
		state := string(p.Status.Phase)
		if p.DeletionTimestamp != nil {
			state += ",terminating"
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Waiting != nil {
				state += "," + cs.State.Waiting.Reason + ": " + cs.State.Waiting.Message
			}
			if cs.Ready {
				state += ",ready"
			}
		}
		parts = append(parts, p.Name+"="+state)
	}
	return strings.Join(parts, " ")
}

// overlayDir is the test overlay of the dev overlay.
func overlayDir() string { return filepath.Join("testdata", "overlay") }
