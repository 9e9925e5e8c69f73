package policy

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestLoadDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := writeFile(t, dir, "a.yaml", "domain: a\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n")
	b := writeFile(t, dir, "b.YML", "domain: b\n")
	h := writeFile(t, dir, "http.yml", "http: {routes: [{name: all, path_prefix: /}]}\n")
	writeFile(t, dir, ".hidden.yaml", "not: [valid")
	writeFile(t, dir, "README.md", "not yaml")
	writeFile(t, dir, "c.yaml.bak", "not: [valid")
	if err := os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "sub.yaml"), "d.yaml", "domain: d\n")

	p, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{a, b, h}; !slices.Equal(p.Files, want) {
		t.Errorf("Files %v, want %v", p.Files, want)
	}
	if len(p.Domains) != 2 || p.Domain("a").File != a || p.Domain("b") == nil || p.HTTP == nil {
		t.Errorf("domains %v, http %v: want a and b and the http section", p.Domains, p.HTTP)
	}
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.yaml")
	if _, err := Load(missing); !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, ErrInvalid) ||
		!strings.HasPrefix(err.Error(), missing+": ") {
		t.Errorf("missing file: %v, want a not-exist error naming the file", err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(empty); err == nil || !strings.Contains(err.Error(), "no *.yaml or *.yml files") {
		t.Errorf("empty directory: %v", err)
	}
	dangling := t.TempDir()
	if err := os.Symlink(filepath.Join(dangling, "..data", "x.yaml"), filepath.Join(dangling, "x.yaml")); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dangling); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("dangling symlink: %v, want a not-exist error", err)
	}
}

// configMapDir lays out dir as the kubelet mounts a ConfigMap: the files in a
// timestamped hidden directory, "..data" pointing at it, and one visible
// symlink per key through "..data". It returns the new timestamped
// directory; calling it again swaps "..data" atomically and removes the old
// directory, as an update does.
func configMapDir(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	ts := "..2026_11_29_08_00_00." + strings.ReplaceAll(time.Now().Format("150405.000000000"), ".", "")
	if err := os.Mkdir(filepath.Join(dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		writeFile(t, filepath.Join(dir, ts), name, content)
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	// As the kubelet's atomic writer does: a new file's visible symlink is
	// made only once ..data points at the directory that holds it, so it
	// never dangles (a watcher may load the moment it appears).
	for name := range files {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err != nil {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLoadConfigMapLayout(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	configMapDir(t, dir, map[string]string{"limits.yaml": "domain: a\n", "http.yaml": "http: {}\n"})
	p, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "http.yaml"), filepath.Join(dir, "limits.yaml")}
	if !slices.Equal(p.Files, want) || p.Domain("a") == nil || p.HTTP == nil {
		t.Errorf("files %v, want each file once through its visible symlink: %v", p.Files, want)
	}
}

func TestLoadAnchorsAndMerges(t *testing.T) {
	t.Parallel()
	p := mustLoad(t, "anchors.yaml", `
domain: a
descriptors:
  - key: one
    rate_limit: &base {unit: minute, requests_per_unit: 5, algorithm: sliding_log}
  - key: two
    rate_limit:
      <<: *base
      requests_per_unit: 9
`)
	m, ok := p.Domain("a").Match(entries("two", "x"))
	if !ok || m.Rule.Limits[0].Requests != 9 || m.Rule.Limits[0].Algorithm != "sliding_log" || m.Rule.Limits[0].Period != time.Minute {
		t.Errorf("merged limit %+v, want base overridden with 9 requests", m.Rule)
	}
}

// TestLoadCyclicAliases feeds documents whose anchors refer to themselves
// (yaml.v3 parses them into cyclic trees) or double at every level: Load
// must return an error, not recurse forever or exhaust memory.
func TestLoadCyclicAliases(t *testing.T) {
	t.Parallel()
	for name, doc := range map[string]string{
		"descriptor cycle": "domain: a\ndescriptors: &d\n  - key: k\n    descriptors: *d\n",
		"doubling cycle":   "domain: a\ndescriptors: &d\n  - key: a\n    descriptors: *d\n  - key: b\n    descriptors: *d\n",
		"merge cycle":      "domain: a\ndescriptors:\n  - &m\n    key: k\n    <<: *m\n",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			done := make(chan error, 1)
			go func() {
				_, err := Load(writeFile(t, t.TempDir(), "cycle.yaml", doc))
				done <- err
			}()
			select {
			case err := <-done:
				var probs Errors
				if !errors.As(err, &probs) || len(probs) > maxProblems+1 {
					t.Errorf("got %d problems (%v), want an error with at most %d", len(probs), err, maxProblems+1)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("Load did not return")
			}
		})
	}
}
