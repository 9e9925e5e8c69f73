package policy

import (
	"fmt"
	"sort"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// PlacedLimit is one limit of a loaded policy and where it is written.
type PlacedLimit struct {
	// Where names the limit's place: `domain "d" rule d.k_v`, `http route "r"`
	// or `tier set "s" tier "t"`.
	Where string
	// Limit is the limit itself.
	Limit ratelimit.Limit
}

// Allotments lists every limit of p whose consistency is allotment, sorted
// by place, for `extauthz validate` to explain.
func (p *Policy) Allotments() []PlacedLimit {
	return p.placed(func(l ratelimit.Limit) bool { return l.Consistency == ratelimit.Allotment })
}

// Globals lists every limit of p whose scope is global, sorted by place.
func (p *Policy) Globals() []PlacedLimit {
	return p.placed(func(l ratelimit.Limit) bool { return l.Scope == ratelimit.Global })
}

// placed lists every limit of p that keep selects, sorted by place.
func (p *Policy) placed(keep func(ratelimit.Limit) bool) []PlacedLimit {
	var out []PlacedLimit
	add := func(where string, ls []ratelimit.Limit) {
		for _, l := range ls {
			if keep(l) {
				out = append(out, PlacedLimit{Where: where, Limit: l})
			}
		}
	}
	for name, d := range p.Domains {
		for _, r := range d.rules() {
			add(fmt.Sprintf("domain %q rule %s", name, r.ID), r.Limits)
		}
	}
	if p.HTTP != nil {
		for _, r := range p.HTTP.Routes {
			add(fmt.Sprintf("http route %q", r.Name), r.Limits)
		}
		for name, ts := range p.HTTP.Tiers {
			for _, tier := range ts.Tiers() {
				add(fmt.Sprintf("tier set %q tier %q", name, tier), ts.Limits[tier])
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Where < out[j].Where })
	return out
}

// rules returns every rule of d's tree.
func (d *Domain) rules() []*Rule {
	var out []*Rule
	var walk func(n *node)
	walk = func(n *node) {
		if n == nil {
			return
		}
		if n.rule != nil {
			out = append(out, n.rule)
		}
		for _, kc := range n.children {
			for _, c := range kc.exact {
				walk(c)
			}
			for _, c := range kc.wildcards {
				walk(c)
			}
			walk(kc.anyValue)
		}
	}
	walk(d.root)
	return out
}
