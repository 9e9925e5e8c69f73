package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/extauthz/extauthz/pkg/policy"
)

// yamlBlock is one ```yaml block of a document, with the doc-test marker
// (an HTML comment, <!-- doc-test: KIND ... -->) on the nearest non-blank
// line before it, if any.
type yamlBlock struct {
	file, kind, text string
	line             int
}

var docTestMarker = regexp.MustCompile(`^<!-- doc-test: ([a-z-]+)\b.*-->$`)

// yamlBlocks returns the yaml blocks of README.md and docs/*.md.
func yamlBlocks(t *testing.T) []yamlBlock {
	t.Helper()
	var out []yamlBlock
	for _, file := range markdownFiles(t) {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(text), "\n")
		for i := 0; i < len(lines); i++ {
			if strings.TrimSpace(lines[i]) != "```yaml" {
				continue
			}
			b := yamlBlock{file: strings.TrimPrefix(file, "../../"), line: i + 1}
			for j := i - 1; j >= 0; j-- {
				if s := strings.TrimSpace(lines[j]); s != "" {
					if m := docTestMarker.FindStringSubmatch(s); m != nil {
						b.kind = m[1]
					}
					break
				}
			}
			var body []string
			for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
				body = append(body, lines[i])
			}
			b.text = strings.Join(body, "\n") + "\n"
			out = append(out, b)
		}
	}
	return out
}

// policyTopLevel is a top-level key only a policy file has.
var policyTopLevel = regexp.MustCompile(`(?m)^(domain|http|descriptors):`)

// TestDocPolicyBlocksLoad: every yaml block of the docs that is a policy
// loads with the real loader, and every other one says what it is:
//
//	<!-- doc-test: policy -->              a policy file (also detected by a top-level domain, http or descriptors key)
//	<!-- doc-test: policy-descriptors -->  entries of a descriptors list, loaded inside a domain
//	<!-- doc-test: invalid-policy ... -->  a policy meant to be refused: it must fail to load
//	<!-- doc-test: reference ... -->       a field reference, alternatives side by side: not loadable
//	<!-- doc-test: envoy-hcm -->           an Envoy fragment (test/k8s validates it with Envoy)
//	<!-- doc-test: other ... -->           neither a policy nor an Envoy config (say what)
func TestDocPolicyBlocksLoad(t *testing.T) {
	t.Parallel()
	loaded := 0
	for _, b := range yamlBlocks(t) {
		where := b.file + ":" + strconv.Itoa(b.line)
		kind := b.kind
		if kind == "" && policyTopLevel.MatchString(b.text) {
			kind = "policy"
		}
		text := b.text
		switch kind {
		case "policy", "invalid-policy":
		case "policy-descriptors":
			text = "domain: doc\ndescriptors:\n" + text
		case "reference", "envoy-hcm", "other":
			continue
		case "":
			t.Errorf("%s: a yaml block that is no policy and has no <!-- doc-test: KIND --> marker", where)
			continue
		default:
			t.Errorf("%s: unknown doc-test marker %q", where, kind)
			continue
		}
		path := filepath.Join(t.TempDir(), "policy.yaml")
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := policy.Load(path)
		switch {
		case kind == "invalid-policy" && err == nil:
			t.Errorf("%s: marked invalid-policy, but it loads", where)
		case kind != "invalid-policy" && err != nil:
			t.Errorf("%s: the policy does not load: %v", where, err)
		}
		loaded++
	}
	if loaded < 3 {
		t.Errorf("loaded %d policy blocks; the parser has lost them", loaded)
	}
}
