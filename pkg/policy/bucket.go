package policy

import (
	"slices"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// MaxBucketEntries bounds the entries of a bucket ID that MatchBucket
// accepts: a larger map matches nothing. Envoy builds bucket IDs from a
// handful of configured keys; the bound keeps the search small whatever a
// client sends.
const MaxBucketEntries = 16

// maxBucketVisits bounds the nodes one MatchBucket visits: with at most
// MaxBucketEntries keys and a tree written by hand the search visits a few
// nodes, but a tree with many keys per level could make the backtracking
// search combinatorial.
const maxBucketVisits = 4096

// MatchBucket finds the rule for an RLQS bucket ID: a map of entries with no
// order of its own. It walks the descriptor tree as Match does, choosing at
// each level a child whose key is in the bucket and whose value matches
// (exact value, then wildcards in file order, then the key-only default).
// Every entry of the bucket must be used, once, on a path that ends on a
// node with a rule: the bucket is then the descriptor read along that path,
// and the result is Match's for it. When several paths fit, keys are tried
// in byte order at each level and the first complete path wins
// (backtracking when a choice leads nowhere).
//
// So a bucket {tenant: acme, route: orders} matches a tree written
// tenant → route as the descriptor (tenant=acme, route=orders), and also one
// written route → tenant; a bucket with an entry the tree has no level for
// matches nothing, as an RLS descriptor with one entry too many does.
func (d *Domain) MatchBucket(bucket map[string]string) (Match, bool) {
	if d == nil || d.root == nil || len(bucket) == 0 || len(bucket) > MaxBucketEntries {
		return Match{}, false
	}
	keys := make([]string, 0, len(bucket))
	for k := range bucket {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	s := bucketSearch{bucket: bucket, keys: keys, used: make([]bool, len(keys))}
	if !s.walk(d.root) {
		return Match{}, false
	}
	return d.Match(s.path)
}

// bucketSearch is the state of one MatchBucket.
type bucketSearch struct {
	bucket map[string]string
	keys   []string // sorted
	used   []bool   // by index into keys
	path   []ratelimit.Entry
	visits int
}

// walk extends s.path below n until every key is used on a node with a
// rule; it reports whether it found such a path.
func (s *bucketSearch) walk(n *node) bool {
	if len(s.path) == len(s.keys) {
		return n.rule != nil
	}
	for i, k := range s.keys {
		if s.used[i] || n.children[k] == nil {
			continue
		}
		if s.visits++; s.visits > maxBucketVisits {
			return false
		}
		e := ratelimit.Entry{Key: k, Value: s.bucket[k]}
		c := n.child(e)
		if c == nil {
			continue
		}
		s.used[i] = true
		s.path = append(s.path, e)
		if s.walk(c) {
			return true
		}
		s.path = s.path[:len(s.path)-1]
		s.used[i] = false
	}
	return false
}
