package k8s

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	istionetworking "istio.io/client-go/pkg/apis/networking/v1alpha3"
	istiosecurity "istio.io/client-go/pkg/apis/security/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// repoRoot is the main module's root, two levels above this package.
func repoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the test source file")
	}
	root := filepath.Join(filepath.Dir(file), "..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root %s: %v", root, err)
	}
	return root
}

// scheme knows every kind the manifests may contain: the Kubernetes kinds
// we ship and Istio's. A kind outside it fails the decode.
func newScheme(t testing.TB) *k8sruntime.Scheme {
	t.Helper()
	s := k8sruntime.NewScheme()
	for _, add := range []func(*k8sruntime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, autoscalingv2.AddToScheme,
		policyv1.AddToScheme, networkingv1.AddToScheme,
		istionetworking.AddToScheme, istiosecurity.AddToScheme,
		monitoringv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// object is one decoded manifest and where it came from.
type object struct {
	Source string // file, or kustomization directory, and document index
	GVK    schema.GroupVersionKind
	Obj    k8sruntime.Object
}

func (o object) String() string {
	m, _ := o.Obj.(interface{ GetName() string })
	name := ""
	if m != nil {
		name = m.GetName()
	}
	return fmt.Sprintf("%s %s/%s", o.Source, o.GVK.Kind, name)
}

// splitYAML returns the non-empty documents of a multi-document stream.
func splitYAML(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(stripComments(doc))) > 0 {
			docs = append(docs, doc)
		}
	}
}

func stripComments(doc []byte) []byte {
	var out []byte
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			out = append(out, line...)
			out = append(out, '\n')
		}
	}
	return out
}

// strictJSON converts YAML to JSON without coercing types to the target
// (the API server does not coerce either: `value: true` into a string field
// fails) and rejects duplicate keys.
func strictJSON(doc []byte) ([]byte, error) {
	return yaml.YAMLToJSONStrict(doc)
}

// decodeStrict decodes YAML into out the way the API server's strict field
// validation does: unknown fields, case-mismatched fields and duplicate
// fields are errors.
func decodeStrict(doc []byte, out any) error {
	j, err := strictJSON(doc)
	if err != nil {
		return err
	}
	strictErrs, err := sigsjson.UnmarshalStrict(j, out, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strictErrs...)
}

// decodeProtoSpec strictly decodes the spec of an object whose spec is a
// protobuf message (Istio's), with protojson. Istio's own UnmarshalJSON
// allows unknown fields, so the envelope decode alone would let a typo in
// the spec through.
func decodeProtoSpec(doc []byte, obj k8sruntime.Object) error {
	v := reflect.ValueOf(obj).Elem().FieldByName("Spec")
	if !v.IsValid() || !v.CanAddr() {
		return nil
	}
	m, ok := v.Addr().Interface().(proto.Message)
	if !ok {
		return nil
	}
	j, err := strictJSON(doc)
	if err != nil {
		return err
	}
	var envelope struct {
		Spec json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(j, &envelope); err != nil {
		return err
	}
	if envelope.Spec == nil {
		return errors.New("no spec")
	}
	return protojson.Unmarshal(envelope.Spec, m.ProtoReflect().New().Interface())
}

// decodeObjects strictly decodes every document of data into its typed
// Kubernetes or Istio object.
func decodeObjects(t testing.TB, scheme *k8sruntime.Scheme, source string, data []byte) []object {
	t.Helper()
	docs, err := splitYAML(data)
	if err != nil {
		t.Fatalf("%s: %v", source, err)
	}
	var objs []object
	for i, doc := range docs {
		src := fmt.Sprintf("%s#%d", source, i)
		var tm struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Errorf("%s: %v", src, err)
			continue
		}
		gvk := schema.FromAPIVersionAndKind(tm.APIVersion, tm.Kind)
		obj, err := scheme.New(gvk)
		if err != nil {
			t.Errorf("%s: kind %q of %q is not one we decode: %v", src, tm.Kind, tm.APIVersion, err)
			continue
		}
		if err := decodeStrict(doc, obj); err != nil {
			t.Errorf("%s: strict decode of %s: %v", src, gvk.Kind, err)
			continue
		}
		if err := decodeProtoSpec(doc, obj); err != nil {
			t.Errorf("%s: strict decode of %s spec: %v", src, gvk.Kind, err)
			continue
		}
		objs = append(objs, object{Source: src, GVK: gvk, Obj: obj})
	}
	return objs
}

// render runs kustomize in process on dir (relative to the repository root)
// and returns the YAML it would print.
func render(t testing.TB, dir string) []byte {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resMap, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(repoRoot(t), dir))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := resMap.AsYaml()
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	return out
}

// renderObjects renders dir and strictly decodes the output.
func renderObjects(t testing.TB, dir string) []object {
	t.Helper()
	return decodeObjects(t, newScheme(t), dir, render(t, dir))
}

// only returns the objects of type T.
func only[T k8sruntime.Object](objs []object) []T {
	var out []T
	for _, o := range objs {
		if v, ok := o.Obj.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// named returns the object of type T with this name, failing if absent.
func named[T interface {
	k8sruntime.Object
	GetName() string
}](t testing.TB, objs []object, name string) T {
	t.Helper()
	for _, v := range only[T](objs) {
		if v.GetName() == name {
			return v
		}
	}
	var zero T
	t.Fatalf("no %T named %q", zero, name)
	return zero
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func hasPrefixAny(s string, prefixes ...string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// TestStrictDecodeRejects pins what "strict" means for the checks above.
func TestStrictDecodeRejects(t *testing.T) {
	t.Parallel()
	const head = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n"
	cases := map[string]string{
		"unknown field":   head + "    imagee: x\n",
		"mis-cased field": head + "    Image: x\n",
		"duplicate field": head + "    image: x\n    image: y\n",
		"bool as string":  head + "    env: [{name: A, value: true}]\n",
		"unknown kind":    "apiVersion: v1\nkind: Pood\nmetadata: {name: p}\n",
		"istio spec typo": "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: a}\nspec: {actoin: CUSTOM}\n",
	}
	scheme := newScheme(t)
	for name, doc := range cases {
		rec := &recorder{TB: t}
		decodeObjects(rec, scheme, name, []byte(doc))
		if !rec.failed {
			t.Errorf("%s: decoded without error", name)
		}
	}
	if objs := decodeObjects(t, scheme, "valid", []byte(head+"    image: x\n")); len(objs) != 1 {
		t.Errorf("a valid Pod decoded to %d objects", len(objs))
	}
}

// recorder notes errors instead of failing the test that uses it.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Errorf(string, ...any) { r.failed = true }
func (r *recorder) Fatalf(string, ...any) { r.failed = true }
func (r *recorder) Helper()               {}
