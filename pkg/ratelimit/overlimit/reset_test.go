package overlimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/memstore"
)

// TestResetForgetsRememberedDenial: after Reset the next request reaches
// the inner store and is admitted, instead of getting the denial
// remembered before.
func TestResetForgetsRememberedDenial(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{t: time.Unix(1_700_006_400, 0)}
	mem, err := memstore.New(memstore.Options{Now: clk.now, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newCached(t, mem, clk)
	ctx := context.Background()
	req := ratelimit.Request{Key: "acme", Limits: []ratelimit.Limit{{Requests: 1, Period: time.Minute}}, Hits: 1}
	for i, want := range []bool{true, false} {
		d, err := s.AllowBatch(ctx, []ratelimit.Request{req})
		if err != nil || d[0].Allowed != want {
			t.Fatalf("call %d: %+v, %v; want allowed=%v", i, d, err, want)
		}
	}
	if got := s.StateKeys(req); len(got) != 1 {
		t.Fatalf("StateKeys = %v, want one key", got)
	}
	if err := s.Reset(ctx, []ratelimit.Request{req}); err != nil {
		t.Fatal(err)
	}
	d, err := s.AllowBatch(ctx, []ratelimit.Request{req})
	if err != nil || !d[0].Allowed {
		t.Fatalf("after Reset: %+v, %v; want allowed", d, err)
	}
}
