package policy

import (
	"strconv"

	"go.yaml.in/yaml/v3"
)

// metadata reads a descriptor's `metadata`: a mapping of arbitrary
// JSON-like values, as envoyproxy/ratelimit accepts it (its keys are not
// validated), returned to Envoy as dynamic metadata. Numbers become
// float64 (a protobuf Struct holds no other number), other scalars their
// YAML type, and anything that is neither a bool, a number nor null the
// literal text.
func (d *decoder) metadata(f field) map[string]any {
	if isNull(f.node) {
		return nil
	}
	if f.node.Kind != yaml.MappingNode {
		d.problem(f.node.Line, f.path, "expected a mapping, got %s", kindName(f.node))
		return nil
	}
	v, _ := d.metaValue(f.node, f.path, 0).(map[string]any)
	return v
}

// metaValue converts one node below metadata; depth bounds the nesting.
func (d *decoder) metaValue(n *yaml.Node, path string, depth int) any {
	if depth > maxDepth {
		d.problem(n.Line, path, "metadata nested deeper than %d levels", maxDepth)
		return nil
	}
	switch n.Kind {
	case yaml.MappingNode:
		out := map[string]any{}
		for _, kv := range d.fields(n, path) {
			out[kv.key] = d.metaValue(kv.node, kv.path, depth+1)
		}
		return out
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for i, item := range n.Content {
			if item = d.resolve(item); item != nil {
				out = append(out, d.metaValue(item, path+"["+strconv.Itoa(i)+"]", depth+1))
			}
		}
		return out
	}
	return metaScalar(n)
}

// metaScalar converts a scalar by its resolved YAML tag.
func metaScalar(n *yaml.Node) any {
	switch n.ShortTag() {
	case "!!null":
		return nil
	case "!!bool":
		var b bool
		if n.Decode(&b) == nil {
			return b
		}
	case "!!int", "!!float":
		var f float64
		if n.Decode(&f) == nil {
			return f
		}
	}
	return n.Value
}
