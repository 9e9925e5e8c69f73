package k8s

import (
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// ignoreRule is one .dockerignore line.
type ignoreRule struct {
	re     *regexp.Regexp
	negate bool
}

// parseDockerignore reads .dockerignore patterns the way Docker does:
// paths relative to the context root, "**" across directories, "!" to
// re-include, the last matching rule wins.
func parseDockerignore(src string) ([]ignoreRule, error) {
	var rules []ignoreRule
	for _, line := range strings.Split(src, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		r := ignoreRule{}
		if p, ok := strings.CutPrefix(line, "!"); ok {
			r.negate, line = true, p
		}
		line = strings.TrimPrefix(filepath.ToSlash(filepath.Clean(line)), "/")
		re, err := regexp.Compile("^" + globRegexp(line) + "$")
		if err != nil {
			return nil, err
		}
		r.re = re
		rules = append(rules, r)
	}
	return rules, nil
}

func globRegexp(pattern string) string {
	var b strings.Builder
	for i := 0; i < len(pattern); i++ {
		switch c := pattern[i]; {
		case strings.HasPrefix(pattern[i:], "**/"):
			b.WriteString("(.*/)?")
			i += 2
		case strings.HasPrefix(pattern[i:], "**"):
			b.WriteString(".*")
			i++
		case c == '*':
			b.WriteString("[^/]*")
		case c == '?':
			b.WriteString("[^/]")
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	return b.String()
}

// excluded reports whether path (slash-separated, relative to the
// context) is left out of the build context: a rule matching the path or
// one of its parent directories excludes it.
func excluded(rules []ignoreRule, path string) bool {
	out := false
	for _, r := range rules {
		for p := path; p != "." && p != ""; p = filepath.ToSlash(filepath.Dir(p)) {
			if r.re.MatchString(p) {
				out = !r.negate
				break
			}
		}
	}
	return out
}

// buildInputs lists, relative to the repository root, every file the
// Dockerfile's go build reads from the context: go.mod, go.sum and the Go
// and embedded files of the main module's packages that cmd/extauthz uses.
func buildInputs(t *testing.T) []string {
	t.Helper()
	root := repoRoot(t)
	cmd := exec.Command("go", "list", "-deps", "-json=Dir,Module,GoFiles,EmbedFiles,SFiles", "./cmd/extauthz")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	files := []string{"go.mod", "go.sum"}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p struct {
			Dir                         string
			Module                      *struct{ Main bool }
			GoFiles, EmbedFiles, SFiles []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if p.Module == nil || !p.Module.Main {
			continue
		}
		rel, err := filepath.Rel(root, p.Dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range append(append(p.GoFiles, p.EmbedFiles...), p.SFiles...) {
			files = append(files, filepath.ToSlash(filepath.Join(rel, f)))
		}
	}
	return files
}

// TestDockerignoreKeepsBuildInputs: nothing the image build needs is left
// out of the context, and what must stay out (.git, tests) is.
func TestDockerignoreKeepsBuildInputs(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	rules, err := parseDockerignore(string(readFile(t, filepath.Join(root, ".dockerignore"))))
	if err != nil {
		t.Fatal(err)
	}
	need := buildInputs(t)
	if len(need) < 10 {
		t.Fatalf("only %d build inputs found: %v", len(need), need)
	}
	// The files the runtime stage copies from the context.
	copied := copyDestinations(t, stages(parseDockerfile(dockerfile(t)))[1])
	for src := range copied {
		if strings.HasPrefix(src, "/") {
			continue // from the build stage
		}
		err := filepath.WalkDir(filepath.Join(root, src), func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				rel, _ := filepath.Rel(root, p)
				need = append(need, filepath.ToSlash(rel))
			}
			return err
		})
		if err != nil {
			t.Errorf("COPY %s: %v", src, err)
		}
	}
	for _, f := range need {
		if excluded(rules, f) {
			t.Errorf(".dockerignore excludes %s, which the image build needs", f)
		}
	}
	for _, f := range []string{".git/HEAD", "test/k8s/go.mod", "pkg/ratelimit/ratelimit_test.go", "k8s/base/kustomization.yaml"} {
		if !excluded(rules, f) {
			t.Errorf(".dockerignore lets %s into the build context", f)
		}
	}
}

func TestDockerignoreMatcher(t *testing.T) {
	t.Parallel()
	rules, err := parseDockerignore("# c\n.git\n**/*_test.go\n*.md\n!README.md\ndocs\n")
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]bool{
		".git/objects/x": true, "a/b/c_test.go": true, "x_test.go": true, "NOTES.md": true,
		"README.md": false, "pkg/README.md": false, "docs/deploy.md": true, "pkg/x.go": false,
		"pkg/docs/x.go": false, "cmd/extauthz/main.go": false,
	} {
		if got := excluded(rules, path); got != want {
			t.Errorf("excluded(%s) = %v, want %v", path, got, want)
		}
	}
}
