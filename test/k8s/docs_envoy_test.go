package k8s

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// envoyDocBlock is a ```yaml block of the docs marked as an Envoy
// fragment: <!-- doc-test: envoy-hcm --> (fields of an HTTP connection
// manager) on the nearest non-blank line before it.
type envoyDocBlock struct {
	where, kind, text string
}

var envoyMarker = regexp.MustCompile(`^<!-- doc-test: (envoy-[a-z-]+)\b.*-->$`)

// envoyDocBlocks returns the marked Envoy blocks of README.md and docs/*.md.
func envoyDocBlocks(t *testing.T) []envoyDocBlock {
	t.Helper()
	root := repoRoot(t)
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var out []envoyDocBlock
	for _, file := range append([]string{filepath.Join(root, "README.md")}, files...) {
		lines := strings.Split(string(readFile(t, file)), "\n")
		for i := 1; i < len(lines); i++ {
			m := envoyMarker.FindStringSubmatch(strings.TrimSpace(lines[i-1]))
			if m == nil || strings.TrimSpace(lines[i]) != "```yaml" {
				continue
			}
			rel, _ := filepath.Rel(root, file)
			b := envoyDocBlock{where: rel + ":" + strconv.Itoa(i+1), kind: m[1]}
			var body []string
			for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
				body = append(body, lines[i])
			}
			b.text = strings.Join(body, "\n")
			out = append(out, b)
		}
	}
	return out
}

// hcmBootstrap is the smallest full config around an HTTP connection
// manager fragment: one listener whose HCM holds the fragment's fields,
// and a static HTTP/2 cluster for each cluster the fragment names.
const hcmBootstrap = `static_resources:
  listeners:
  - name: doc
    address: {socket_address: {address: 127.0.0.1, port_value: 0}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: doc
          route_config:
            virtual_hosts:
            - {name: doc, domains: ["*"], routes: [{match: {prefix: /}, direct_response: {status: 200}}]}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
FRAGMENT
  clusters:
CLUSTERS`

const docCluster = `  - name: NAME
    type: STATIC
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {http2_protocol_options: {}}
    load_assignment:
      cluster_name: NAME
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 4317}}}}]}]
`

var clusterName = regexp.MustCompile(`cluster_name: ([A-Za-z0-9_.-]+)`)

// embed returns a full Envoy config holding the fragment b.
func (b envoyDocBlock) embed(t *testing.T) string {
	t.Helper()
	if b.kind != "envoy-hcm" {
		t.Fatalf("%s: unknown Envoy marker %q (envoy-hcm is known)", b.where, b.kind)
	}
	var frag, clusters strings.Builder
	for _, line := range strings.Split(b.text, "\n") {
		frag.WriteString("          " + line + "\n")
	}
	seen := map[string]bool{}
	for _, m := range clusterName.FindAllStringSubmatch(b.text, -1) {
		if !seen[m[1]] {
			seen[m[1]] = true
			clusters.WriteString(strings.ReplaceAll(docCluster, "NAME", m[1]))
		}
	}
	if len(seen) == 0 {
		clusters.WriteString(strings.ReplaceAll(docCluster, "NAME", "unused"))
	}
	return strings.NewReplacer("FRAGMENT\n", frag.String(), "CLUSTERS", clusters.String()).Replace(hcmBootstrap)
}

// TestDocEnvoyBlocksValidate: every Envoy fragment in the docs, embedded
// in the smallest config that can hold it, is accepted by a real Envoy
// (envoy --mode validate). Under CI=true a missing Envoy fails the test.
func TestDocEnvoyBlocksValidate(t *testing.T) {
	t.Parallel()
	blocks := envoyDocBlocks(t)
	if len(blocks) == 0 {
		t.Fatal("no <!-- doc-test: envoy-hcm --> block in README.md or docs/: docs/tracing.md's tracing fragment is one")
	}
	bin := envoyBin(t)
	for i, b := range blocks {
		path := filepath.Join(t.TempDir(), "envoy-"+strconv.Itoa(i)+".yaml")
		if err := os.WriteFile(path, []byte(b.embed(t)), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, "--mode", "validate", "-c", path, "--log-level", "warn").CombinedOutput()
		if err != nil {
			t.Errorf("%s: envoy --mode validate rejects the block: %v\n%s", b.where, err, out)
		}
	}
}
