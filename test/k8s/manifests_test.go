package k8s

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/types"
)

// Files under k8s/ that are not Kubernetes objects.
const (
	meshConfigFile = "k8s/istio/meshconfig.yaml" // Helm values: meshConfig
	policyDir      = "k8s/base/policy"           // extauthz policy files
	dashboardFile  = "k8s/grafana/extauthz-dashboard.json"
)

// k8sFiles lists every file under k8s/, relative to the repository root.
func k8sFiles(t testing.TB) []string {
	t.Helper()
	root := repoRoot(t)
	var files []string
	err := filepath.WalkDir(filepath.Join(root, "k8s"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, path)
		files = append(files, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func isKustomization(path string) bool { return filepath.Base(path) == "kustomization.yaml" }

// TestManifestsDecodeStrictly decodes every manifest and patch under k8s/
// with the official types: an unknown, misspelt, mis-cased or duplicated
// field fails, and so does a kind we do not know.
func TestManifestsDecodeStrictly(t *testing.T) {
	t.Parallel()
	scheme := newScheme(t)
	root := repoRoot(t)
	n := 0
	for _, f := range k8sFiles(t) {
		switch {
		case isKustomization(f), f == meshConfigFile, f == dashboardFile, strings.HasPrefix(f, policyDir+"/"):
			continue
		case !strings.HasSuffix(f, ".yaml"):
			t.Errorf("%s: unexpected file in k8s/ (manifests are .yaml)", f)
			continue
		}
		objs := decodeObjects(t, scheme, f, readFile(t, filepath.Join(root, f)))
		if len(objs) == 0 {
			t.Errorf("%s: no objects", f)
		}
		n += len(objs)
	}
	if n < 10 {
		t.Errorf("decoded only %d objects; is k8s/ there?", n)
	}
}

// kustomizationFile strictly decodes one kustomization.yaml.
func kustomizationFile(t testing.TB, path string) *types.Kustomization {
	t.Helper()
	var k types.Kustomization
	if err := decodeStrict(readFile(t, filepath.Join(repoRoot(t), path)), &k); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &k
}

// TestEveryFileIsUsed: each manifest, patch and generator input under k8s/
// is referenced by a kustomization, so nothing checked here is dead, and
// nothing deployed escapes the checks on the renders.
func TestEveryFileIsUsed(t *testing.T) {
	t.Parallel()
	files := k8sFiles(t)
	used := map[string]bool{}
	for _, f := range files {
		if !isKustomization(f) {
			continue
		}
		k := kustomizationFile(t, f)
		dir := filepath.Dir(f)
		refs := slices.Clone(k.Resources)
		refs = append(refs, k.Components...) // directories: must exist
		for _, p := range k.Patches {
			refs = append(refs, p.Path)
		}
		for _, g := range k.ConfigMapGenerator {
			refs = append(refs, g.FileSources...)
		}
		for _, g := range k.SecretGenerator {
			refs = append(refs, g.FileSources...)
		}
		for _, r := range refs {
			if r == "" {
				continue
			}
			// A file source may be key=path.
			if _, p, ok := strings.Cut(r, "="); ok {
				r = p
			}
			p := filepath.ToSlash(filepath.Join(dir, r))
			used[p] = true
			if _, err := os.Stat(filepath.Join(repoRoot(t), p)); err != nil {
				t.Errorf("%s references %s: %v", f, r, err)
			}
		}
	}
	for _, f := range files {
		if !isKustomization(f) && f != meshConfigFile && !used[f] {
			t.Errorf("%s is not referenced by any kustomization", f)
		}
	}
}
