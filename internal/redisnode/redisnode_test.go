package redisnode_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/redisnode"
	"github.com/extauthz/extauthz/internal/redistest"
)

// TestClusterNodes: on a real cluster every key lives on one of the masters
// Masters lists, every master holds some key, and a standalone client is
// one node, "".
func TestClusterNodes(t *testing.T) {
	t.Parallel()
	cl := redistest.NewCluster(t)
	cc := cl.Client()
	ctx := context.Background()
	masters, err := redisnode.Masters(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(masters)
	want := slices.Sorted(slices.Values(cl.Addrs))
	if !slices.Equal(masters, want) {
		t.Fatalf("Masters = %v, want %v", masters, want)
	}
	seen := map[string]bool{}
	for i := range 100 {
		node := redisnode.Of(ctx, cc, fmt.Sprintf("xa:rl:{%d}", i))
		if !slices.Contains(masters, node) {
			t.Fatalf("key %d on %q, not a master", i, node)
		}
		seen[node] = true
	}
	if len(seen) != len(masters) {
		t.Errorf("100 keys on %d masters, want all %d", len(seen), len(masters))
	}
	single := redis.NewClient(&redis.Options{Addr: cl.Addrs[0]})
	defer single.Close()
	if n, err := redisnode.Masters(ctx, single); err != nil || !slices.Equal(n, []string{""}) || redisnode.Of(ctx, single, "k") != "" {
		t.Errorf("standalone client: Masters = %q, %v; want one node, \"\"", n, err)
	}
}

// TestIsClusterDown: the reply's text (the typed reply go-redis returns,
// wrapped, is what TestClusterMasterKilled's CLUSTERDOWN window exercises).
func TestIsClusterDown(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("redisstore: %w", redis.ErrClosed), false},
		{errors.New("dial tcp: connection refused"), false},
		{errors.New("CLUSTERDOWN The cluster is down"), true},
		{errors.New("CLUSTERDOWN Hash slot not served"), true},
		{nil, false},
	} {
		if got := redisnode.IsClusterDown(c.err); got != c.want {
			t.Errorf("IsClusterDown(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
