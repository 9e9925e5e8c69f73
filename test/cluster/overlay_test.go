package cluster

import (
	"encoding/base64"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestOverlayMatchesHarness: the test overlay runs the images the harness
// imports (a name that differs would be pulled, and no registry answers),
// and Redis by the name the dev overlay ships (the node's CoreDNS resolves
// it). No cluster needed.
func TestOverlayMatchesHarness(t *testing.T) {
	objs := render(t, overlayDir())
	var images []string
	url := ""
	for _, o := range objs {
		switch o.GetKind() {
		case "Deployment":
			cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			for _, c := range cs {
				images = append(images, c.(map[string]any)["image"].(string))
			}
		case "Secret": // the Redis one; others (the charge key secret) hold no url
			if u := secretValue(t, o, "url"); u != "" {
				url = u
			}
		}
	}
	slices.Sort(images)
	if want := []string{appImage, redisImage}; !slices.Equal(images, want) {
		t.Errorf("images %v, want %v (the ones TestMain imports)", images, want)
	}
	if want := "redis://redis:6379/0"; url != want {
		t.Errorf("Redis URL %q, want the dev overlay's %q", url, want)
	}
}

// secretValue is a Secret's key from stringData, else data (base64); ""
// when it has none.
func secretValue(t *testing.T, o *unstructured.Unstructured, key string) string {
	if v, _, _ := unstructured.NestedString(o.Object, "stringData", key); v != "" {
		return v
	}
	enc, _, _ := unstructured.NestedString(o.Object, "data", key)
	return decodeB64(t, enc)
}

func decodeB64(t *testing.T, s string) string {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
