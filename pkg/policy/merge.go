package policy

import (
	"fmt"
	"sort"
)

// merge moves the top-level descriptors of other (a later file of the same
// domain) into d, as envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG does, and
// returns a problem for each one d already has. Both roots carry the same
// domain name, so the moved subtrees keep their metric IDs and depths.
func (d *Domain) merge(other *Domain) Errors {
	var probs Errors
	switch {
	case d.HeaderStyle == "":
		d.HeaderStyle = other.HeaderStyle
	case other.HeaderStyle != "" && other.HeaderStyle != d.HeaderStyle:
		probs = append(probs, &Problem{File: other.File, Field: "header_style",
			Message: fmt.Sprintf("%q differs from %q in %s", other.HeaderStyle, d.HeaderStyle, d.File)})
	}
	for _, key := range sortedKeys(other.root.children) {
		kc := other.root.children[key]
		for _, c := range kc.all() {
			if prev := d.root.sibling(c); prev != nil {
				probs = append(probs, &Problem{File: other.File, Line: c.line, Field: c.field,
					Message: fmt.Sprintf("duplicate descriptor: key %q value %q is already at %s in %s",
						c.key, c.value, prev.field, d.File)})
				continue
			}
			d.root.add(c)
		}
	}
	return probs
}

// all returns the nodes of kc: exact values sorted, then the wildcards in
// file order, then the key-only default.
func (kc *keyChildren) all() []*node {
	var out []*node
	for _, v := range sortedKeys(kc.exact) {
		out = append(out, kc.exact[v])
	}
	out = append(out, kc.wildcards...)
	if kc.anyValue != nil {
		out = append(out, kc.anyValue)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
