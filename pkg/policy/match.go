package policy

import (
	"strings"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// node is one configured descriptor (the root of a Domain is a node with no
// key). Its children are grouped by key, and within a key indexed three
// ways, so that matching one request entry costs two map lookups and a scan
// of the wildcards written for that key only: no regular expression, no
// allocation.
type node struct {
	key   string
	value string    // as written: "" for a key-only default, a pattern for a wildcard
	glob  *wildcard // non-nil when value holds a '*'
	field string    // where it was written, for "duplicate" messages
	line  int       // and its line

	parent *node
	depth  int    // 1 for a top-level descriptor
	id     string // domain.key_value.key...: the metric path of this node
	rule   *Rule

	share       bool // share_threshold: a wildcard's values share one counter
	valueMetric bool // value_to_metric: the request's value goes into the metric ID
	// pathShare and pathValueMetric say whether this node or an ancestor has
	// share or valueMetric, so Match skips the walk back up when none does.
	pathShare, pathValueMetric bool

	children map[string]*keyChildren
}

// keyChildren are the children of a node written with one key.
type keyChildren struct {
	exact     map[string]*node // by value
	wildcards []*node          // in file order: the first match wins
	anyValue  *node            // the key-only default
}

func newRoot(domain string) *node { return &node{id: domain} }

// child returns the node the entry selects below n, trying the exact value,
// then the wildcards in file order, then the key-only default.
func (n *node) child(e ratelimit.Entry) *node {
	kc := n.children[e.Key]
	if kc == nil {
		return nil
	}
	if c := kc.exact[e.Value]; c != nil {
		return c
	}
	for _, c := range kc.wildcards {
		if c.glob.match(e.Value) {
			return c
		}
	}
	return kc.anyValue
}

// sibling returns the child of n configured with exactly c's key and value.
func (n *node) sibling(c *node) *node {
	kc := n.children[c.key]
	switch {
	case kc == nil:
		return nil
	case c.value == "":
		return kc.anyValue
	case c.glob != nil:
		for _, w := range kc.wildcards {
			if w.value == c.value {
				return w
			}
		}
		return nil
	}
	return kc.exact[c.value]
}

// add links c below n; the caller has checked it is not a duplicate.
func (n *node) add(c *node) {
	c.parent, c.depth = n, n.depth+1
	c.id = n.id + "." + metricPart(c.key, c.value)
	c.pathShare = n.pathShare || (c.share && c.glob != nil)
	c.pathValueMetric = n.pathValueMetric || c.valueMetric
	if n.children == nil {
		n.children = map[string]*keyChildren{}
	}
	kc := n.children[c.key]
	if kc == nil {
		kc = &keyChildren{}
		n.children[c.key] = kc
	}
	switch {
	case c.value == "":
		kc.anyValue = c
	case c.glob != nil:
		kc.wildcards = append(kc.wildcards, c)
	default:
		if kc.exact == nil {
			kc.exact = map[string]*node{}
		}
		kc.exact[c.value] = c
	}
}

// metricPart names one level in a metric ID as envoyproxy/ratelimit does:
// "key" or "key_value".
func metricPart(key, value string) string {
	if value == "" {
		return key
	}
	return key + "_" + value
}

// Match finds the rule for one request descriptor, as envoyproxy/ratelimit
// does: the entries are walked level by level, each choosing the exact
// key+value, else the first wildcard value that matches, else the key-only
// default. A rule applies only when every entry was matched and the node of
// the last entry has a rate_limit (or is unlimited): a descriptor with more
// entries than the configured depth, or one that ends on a node without a
// limit, matches nothing, and the second result is false.
func (d *Domain) Match(entries []ratelimit.Entry) (Match, bool) {
	if d == nil || d.root == nil || len(entries) == 0 {
		return Match{}, false
	}
	n := d.root
	for _, e := range entries {
		if n = n.child(e); n == nil {
			return Match{}, false
		}
	}
	if n.rule == nil {
		return Match{}, false
	}
	m := Match{Rule: n.rule, KeyEntries: entries, MetricID: n.rule.ID}
	if n.pathShare {
		m.KeyEntries = n.sharedEntries(entries)
	}
	if n.rule.DetailedMetric || n.pathValueMetric {
		m.MetricID = n.metricID(d.Name, entries)
	}
	return m, true
}

// HasTopLevelKey reports whether some top-level descriptor of d has this key
// (with any value, a wildcard, or none).
func (d *Domain) HasTopLevelKey(key string) bool {
	return d != nil && d.root != nil && d.root.children[key] != nil
}

// path returns the nodes from the first level down to n.
func (n *node) path() []*node {
	p := make([]*node, n.depth)
	for c := n; c != nil && c.depth > 0; c = c.parent {
		p[c.depth-1] = c
	}
	return p
}

// sharedEntries copies entries, writing the pattern instead of the value at
// each level matched by a share_threshold wildcard.
func (n *node) sharedEntries(entries []ratelimit.Entry) []ratelimit.Entry {
	out := append([]ratelimit.Entry(nil), entries...)
	for i, c := range n.path() {
		if c.share && c.glob != nil {
			out[i].Value = c.value
		}
	}
	return out
}

// metricID names a match for metrics when the configuration asks for request
// values in it: every value for detailed_metric, the flagged levels' values
// for value_to_metric.
func (n *node) metricID(domain string, entries []ratelimit.Entry) string {
	var b strings.Builder
	b.WriteString(domain)
	for i, c := range n.path() {
		b.WriteByte('.')
		if n.rule.DetailedMetric || c.valueMetric {
			b.WriteString(metricPart(entries[i].Key, entries[i].Value))
		} else {
			b.WriteString(metricPart(c.key, c.value))
		}
	}
	return b.String()
}

// wildcard is a value pattern in which each '*' matches any run of bytes
// (envoyproxy/ratelimit accepts '*' anywhere; a trailing one is the usual
// case). It is split once at load so matching is a few string comparisons.
type wildcard struct {
	prefix, suffix string
	middle         []string
	minLen         int
}

func compileWildcard(pattern string) *wildcard {
	parts := strings.Split(pattern, "*")
	w := &wildcard{prefix: parts[0], suffix: parts[len(parts)-1]}
	w.minLen = len(w.prefix) + len(w.suffix)
	for _, m := range parts[1 : len(parts)-1] {
		if m != "" {
			w.middle = append(w.middle, m)
			w.minLen += len(m)
		}
	}
	return w
}

// match reports whether s matches the pattern. Taking each middle part at
// its leftmost occurrence is enough: '*' can absorb whatever lies between.
func (w *wildcard) match(s string) bool {
	if len(s) < w.minLen || !strings.HasPrefix(s, w.prefix) || !strings.HasSuffix(s, w.suffix) {
		return false
	}
	s = s[len(w.prefix) : len(s)-len(w.suffix)]
	for _, m := range w.middle {
		i := strings.Index(s, m)
		if i < 0 {
			return false
		}
		s = s[i+len(m):]
	}
	return true
}
