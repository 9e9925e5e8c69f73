package redisstore

import (
	"context"
	"testing"

	"github.com/extauthz/extauthz/internal/redistest"
)

// TestClusterBatchRecoversFromNoScript: a batch on a fresh cluster (empty
// script caches on every master) is answered NOSCRIPT per node and re-sent
// with EVAL; every request is decided once, charged once.
func TestClusterBatchRecoversFromNoScript(t *testing.T) {
	t.Parallel()
	cl := redistest.NewCluster(t)
	cc := cl.Client()
	s := newStore(t, cc)
	ctx := context.Background()
	reqs := spreadRequests(30, 1)
	for round := 0; round < 4; round++ {
		if round == 2 {
			if err := cc.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		d, err := s.AllowBatch(ctx, reqs)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for i, dec := range d {
			if want := round < 3; dec.Allowed != want {
				t.Fatalf("round %d request %d: allowed %v, want %v", round, i, dec.Allowed, want)
			}
		}
	}
	assertKeysOnEveryMaster(t, cc)
}
