package memstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// TestPeekChangesNothingAndResetEmpties: a 0-hit request leaves the stored
// states exactly as they were, and Reset removes them.
func TestPeekChangesNothingAndResetEmpties(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Unix(1_700_006_400, 0)
	for _, alg := range ratelimit.Algorithms() {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			s, err := New(Options{Now: func() time.Time { return now }, SweepInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			l := ratelimit.Limit{Algorithm: alg, Requests: 5, Period: time.Minute}
			l2 := ratelimit.Limit{Algorithm: alg, Requests: 50, Period: time.Hour}
			req := ratelimit.Request{Key: "acme", Limits: []ratelimit.Limit{l, l2}, Hits: 2}
			if _, err := s.AllowBatch(ctx, []ratelimit.Request{req}); err != nil {
				t.Fatal(err)
			}
			before := states(s, req)
			peek := req
			peek.Hits = 0
			for range 3 {
				d, err := s.AllowBatch(ctx, []ratelimit.Request{peek})
				if err != nil || d[0].Results[0].Remaining != 3 {
					t.Fatalf("peek = %+v, %v; want remaining 3", d, err)
				}
			}
			if after := states(s, req); after != before {
				t.Fatalf("a 0-hit request changed the state:\n%s\n%s", before, after)
			}
			if err := s.Reset(ctx, []ratelimit.Request{req}); err != nil {
				t.Fatal(err)
			}
			if n := s.Stats().States; n != 0 {
				t.Fatalf("%d states after Reset, want 0", n)
			}
			d, err := s.AllowBatch(ctx, []ratelimit.Request{peek})
			if err != nil || d[0].Results[0].Remaining != 5 {
				t.Fatalf("after reset = %+v, %v; want remaining 5", d, err)
			}
		})
	}
}

// states renders the stored states of req's limits.
func states(s *Store, req ratelimit.Request) string {
	sh, h := s.locate(req.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var out string
	for _, l := range req.Limits {
		id := identOf(req.Key, l)
		if e := sh.find(h^salt(id), id); e != nil {
			out += fmt.Sprintf("%+v;", e.st)
		} else {
			out += "none;"
		}
	}
	return out
}
