package failover_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/failover"
	"github.com/extauthz/extauthz/pkg/ratelimit/memstore"
)

// TestResetResetsPrimaryAndFallback: usage counted by either store is
// gone after Reset, and the keys are the primary's.
func TestResetResetsPrimaryAndFallback(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	newMem := func() *memstore.Store {
		s, err := memstore.New(memstore.Options{SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	primary, fallback := newMem(), newMem()
	s, err := failover.New(primary, failover.Options{Mode: failover.Open, Fallback: fallback, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	req := ratelimit.Request{Key: "acme", Limits: []ratelimit.Limit{{Requests: 5, Period: time.Hour}}, Hits: 2}
	for _, st := range []ratelimit.Store{primary, fallback} {
		if _, err := st.AllowBatch(ctx, []ratelimit.Request{req}); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := s.StateKeys(req), primary.StateKeys(req); len(got) != 1 || got[0] != want[0] {
		t.Fatalf("StateKeys = %v, want the primary's %v", got, want)
	}
	if err := s.Reset(ctx, []ratelimit.Request{req}); err != nil {
		t.Fatal(err)
	}
	for name, st := range map[string]*memstore.Store{"primary": primary, "fallback": fallback} {
		if n := st.Stats().States; n != 0 {
			t.Errorf("%s holds %d states after Reset, want 0", name, n)
		}
	}
}
