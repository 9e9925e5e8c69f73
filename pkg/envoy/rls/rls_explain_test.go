package rls

import (
	"context"
	"testing"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// TestExplainChargesNothingAndForetellsTheAnswer: Explain reports each
// descriptor's rule, request and state; repeating it changes nothing; and
// its Overall is what the next real call answers, up to the call that
// exhausts the limit and past it.
func TestExplainChargesNothingAndForetellsTheAnswer(t *testing.T) {
	t.Parallel()
	e := startRLS(t, `
domain: edge
descriptors:
  - key: route
    value: orders
    rate_limit: {name: orders, unit: minute, requests_per_unit: 2}
  - key: route
    value: free
    rate_limit: {unlimited: true}
`)
	ctx := context.Background()
	req := envoytest.Request("edge", envoytest.Desc("tenant", "acme", "route", "orders"),
		envoytest.Desc("route", "free"), envoytest.Desc("route", "other"))
	q := Query{Domain: "edge", Descriptors: [][]ratelimit.Entry{
		{{Key: "tenant", Value: "acme"}, {Key: "route", Value: "orders"}}, {{Key: "route", Value: "free"}}, {{Key: "route", Value: "other"}}}}
	for call := range 3 {
		var ex Explanation
		for range 2 { // twice: the first Explain must have charged nothing
			var err error
			if ex, err = e.rls.Explain(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		d := ex.Descriptors[0]
		if !ex.Known || d.Rule != "orders" || d.Request == nil || d.Request.Hits != 1 || d.Request.Key != "acme|edge|route=orders" {
			t.Fatalf("call %d: descriptor 0 = %+v", call, d)
		}
		if got, want := d.Results[0].Remaining, int64(2-call); got != max(want, 0) {
			t.Fatalf("call %d: remaining = %d, want %d", call, got, max(want, 0))
		}
		if o := ex.Descriptors[1].Outcome; o != envoy.OutcomeUnlimited || ex.Descriptors[1].Request != nil {
			t.Fatalf("descriptor 1 = %+v, want unlimited and not counted", ex.Descriptors[1])
		}
		if o := ex.Descriptors[2].Outcome; o != envoy.OutcomeNoMatch {
			t.Fatalf("descriptor 2 outcome = %q, want no_match", o)
		}
		resp := e.call(t, req)
		if ex.Overall != resp.GetOverallCode().String() {
			t.Fatalf("call %d: Explain said %s, the call answered %s", call, ex.Overall, resp.GetOverallCode())
		}
	}
}
