package policy

import (
	"fmt"
	"strconv"

	"go.yaml.in/yaml/v3"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// The YAML is walked as a yaml.Node tree rather than decoded into structs:
// yaml.v3's strict mode (KnownFields) stops at nothing past a type error and
// loses line numbers once a value is in a struct, while walking the nodes
// reports every unknown field and bad value with its line and field path.

const (
	// nodeBudget bounds how many nodes one file may expand to; anchors and
	// aliases could otherwise make a small file expand exponentially.
	nodeBudget = 1 << 20
	// maxProblems bounds the problems reported for one file; past it the
	// file is not walked further (a broken file says enough by then).
	maxProblems = 100
	// maxMergeDepth bounds nested "<<" merge keys (an anchor may even
	// refer to itself, which yaml.v3 parses into a cyclic tree).
	maxMergeDepth = 16
)

// decoder walks the node tree of one file and collects its problems.
type decoder struct {
	file       string
	probs      *Errors
	budget     int
	count      int // problems reported
	mergeDepth int
	// descAlg is the algorithm of a descriptor limit naming none
	// (LoadOptions.DescriptorAlgorithm, defaulted).
	descAlg ratelimit.Algorithm
}

func newDecoder(file string, probs *Errors) *decoder {
	return &decoder{file: file, probs: probs, budget: nodeBudget, descAlg: ratelimit.GCRA}
}

// field is one key of a mapping (or one item of a sequence, with an empty key).
type field struct {
	key  string
	node *yaml.Node // the value, aliases resolved; never nil
	path string     // e.g. descriptors[0].rate_limit.unit
	line int        // the key's line, for "unknown field"
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (d *decoder) problem(line int, path, format string, args ...any) {
	switch {
	case d.count == maxProblems:
		*d.probs = append(*d.probs, &Problem{File: d.file, Message: "too many problems; stopped reading this file"})
		d.budget = 0
		fallthrough
	case d.count > maxProblems:
		d.count++
		return
	}
	d.count++
	*d.probs = append(*d.probs, &Problem{
		File: d.file, Line: line, Field: path, Message: fmt.Sprintf(format, args...),
	})
}

// resolve follows aliases and charges the node budget; nil means the budget
// is exhausted (reported once).
func (d *decoder) resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 64; i++ {
		n = n.Alias
	}
	if n == nil || n.Kind == yaml.AliasNode {
		return nil
	}
	if d.budget <= 0 {
		return nil
	}
	if d.budget--; d.budget == 0 {
		d.problem(n.Line, "", "document expands to too many nodes (anchors and aliases)")
		return nil
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

// fields returns the keys of a mapping in document order, "<<" merges
// expanded (explicit keys win over merged ones); a null value is an empty
// mapping.
func (d *decoder) fields(n *yaml.Node, path string) []field {
	n = d.resolve(n)
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		d.problem(n.Line, path, "expected a mapping, got %s", kindName(n))
		return nil
	}
	var out, merged []field
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merged = append(merged, d.merge(v, path)...)
			continue
		}
		if k = d.resolve(k); k == nil || k.Kind != yaml.ScalarNode {
			d.problem(n.Line, path, "mapping keys must be strings")
			continue
		}
		p := joinPath(path, k.Value)
		if seen[k.Value] {
			d.problem(k.Line, p, "duplicate field")
			continue
		}
		seen[k.Value] = true
		if v = d.resolve(v); v != nil {
			out = append(out, field{key: k.Value, node: v, path: p, line: k.Line})
		}
	}
	for _, f := range merged {
		if !seen[f.key] {
			seen[f.key] = true
			out = append(out, f)
		}
	}
	return out
}

// merge expands the value of a "<<" key: a mapping or a list of mappings,
// earlier ones winning.
func (d *decoder) merge(v *yaml.Node, path string) []field {
	if d.mergeDepth >= maxMergeDepth {
		d.problem(v.Line, path, "merge keys nested too deeply")
		return nil
	}
	d.mergeDepth++
	defer func() { d.mergeDepth-- }()
	if v = d.resolve(v); v == nil || v.Kind != yaml.SequenceNode {
		return d.fields(v, path)
	}
	var out []field
	seen := map[string]bool{}
	for _, item := range v.Content {
		for _, f := range d.fields(item, path) {
			if !seen[f.key] {
				seen[f.key] = true
				out = append(out, f)
			}
		}
	}
	return out
}

// items returns the elements of a sequence; a null value is an empty list.
func (d *decoder) items(f field) []field {
	if isNull(f.node) {
		return nil
	}
	if f.node.Kind != yaml.SequenceNode {
		d.problem(f.node.Line, f.path, "expected a list, got %s", kindName(f.node))
		return nil
	}
	out := make([]field, 0, len(f.node.Content))
	for i, item := range f.node.Content {
		if item = d.resolve(item); item != nil {
			p := fmt.Sprintf("%s[%d]", f.path, i)
			out = append(out, field{node: item, path: p, line: item.Line})
		}
	}
	return out
}

func (d *decoder) unknown(f field) {
	d.problem(f.line, f.path, "unknown field")
}

// str reads any scalar as its literal text (so `value: 30` is "30", as
// envoyproxy/ratelimit reads it); null is "".
func (d *decoder) str(f field) string {
	if isNull(f.node) {
		return ""
	}
	if f.node.Kind != yaml.ScalarNode {
		d.problem(f.node.Line, f.path, "expected a string, got %s", kindName(f.node))
		return ""
	}
	return f.node.Value
}

func (d *decoder) boolean(f field) bool {
	var b bool
	if isNull(f.node) {
		return false
	}
	if f.node.Kind != yaml.ScalarNode || f.node.Decode(&b) != nil {
		d.problem(f.node.Line, f.path, "expected true or false, got %s", describe(f.node))
	}
	return b
}

func (d *decoder) integer(f field) int64 {
	if isNull(f.node) {
		return 0
	}
	var v int64
	if f.node.Kind == yaml.ScalarNode && f.node.ShortTag() == "!!int" && f.node.Decode(&v) == nil {
		return v
	}
	d.problem(f.node.Line, f.path, "expected an integer, got %s", describe(f.node))
	return 0
}

func (d *decoder) strs(f field) []string {
	var out []string
	for _, item := range d.items(f) {
		out = append(out, d.str(item))
	}
	return out
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return describe(n)
	}
	return "an unsupported node"
}

// describe quotes a scalar for a message, cut short if long.
func describe(n *yaml.Node) string {
	if n.Kind != yaml.ScalarNode {
		return kindName(n)
	}
	v := n.Value
	if len(v) > 40 {
		v = v[:40] + "..."
	}
	return strconv.Quote(v)
}
