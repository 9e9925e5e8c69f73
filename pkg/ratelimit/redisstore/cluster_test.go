package redisstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// pipelineCounter counts pipelines sent to each node.
type pipelineCounter struct {
	mu     sync.Mutex
	byNode map[string]int
}

func (p *pipelineCounter) hook(addr string) redis.Hook {
	return hookFunc{pipeline: func(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
		return func(ctx context.Context, cmds []redis.Cmder) error {
			// Connection set-up (HELLO, CLIENT SETINFO) also runs as a
			// pipeline: count only the scripts'.
			if len(cmds) > 0 && (cmds[0].Name() == "evalsha" || cmds[0].Name() == "eval") {
				p.mu.Lock()
				p.byNode[addr]++
				p.mu.Unlock()
			}
			return next(ctx, cmds)
		}
	}}
}

type hookFunc struct {
	pipeline func(redis.ProcessPipelineHook) redis.ProcessPipelineHook
}

func (h hookFunc) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h hookFunc) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h hookFunc) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return h.pipeline(next)
}

// spreadRequests returns n requests, each with every algorithm as one limit
// of its own identity (so every script touches four keys of one slot).
func spreadRequests(n int, hits int64) []ratelimit.Request {
	reqs := make([]ratelimit.Request, n)
	for i := range reqs {
		key := ratelimit.Key("tenant", "api", []ratelimit.Entry{{Key: "user", Value: fmt.Sprint(i)}})
		reqs[i] = ratelimit.Request{Key: key, Hits: hits, Limits: []ratelimit.Limit{
			limitFor(ratelimit.GCRA, 3, time.Minute),
			limitFor(ratelimit.SlidingLog, 3, time.Minute),
			limitFor(ratelimit.SlidingWindow, 3, time.Hour),
			limitFor(ratelimit.FixedWindow, 3, time.Hour),
		}}
	}
	return reqs
}

// TestClusterBatchOneRoundTripPerNode: a batch whose keys land on all three
// masters is one pipeline per master, never CROSSSLOT, and each identity
// admits exactly its limit.
func TestClusterBatchOneRoundTripPerNode(t *testing.T) {
	t.Parallel()
	cl := redistest.NewCluster(t)
	cc := cl.Client()
	counter := &pipelineCounter{byNode: map[string]int{}}
	cc.OnNewNode(func(c *redis.Client) { c.AddHook(counter.hook(c.Options().Addr)) })
	s := newStore(t, cc)
	ctx := context.Background()
	if err := s.Ping(ctx); err != nil { // preload on every master: no NOSCRIPT pass
		t.Fatal(err)
	}
	reqs := spreadRequests(30, 1)
	for round := 0; round < 5; round++ {
		counter.mu.Lock()
		clear(counter.byNode)
		counter.mu.Unlock()
		d, err := s.AllowBatch(ctx, reqs)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for i, dec := range d {
			if want := round < 3; dec.Allowed != want {
				t.Fatalf("round %d request %d: allowed %v, want %v", round, i, dec.Allowed, want)
			}
		}
		counter.mu.Lock()
		if len(counter.byNode) != 3 {
			t.Errorf("round %d: pipelines went to %v, want all 3 masters", round, counter.byNode)
		}
		for node, n := range counter.byNode {
			if n != 1 {
				t.Errorf("round %d: %d pipelines to %s, want 1", round, n, node)
			}
		}
		counter.mu.Unlock()
	}
	assertKeysOnEveryMaster(t, cc)
}

// assertKeysOnEveryMaster checks that every master holds keys and that every
// key has a TTL.
func assertKeysOnEveryMaster(t *testing.T, cc *redis.ClusterClient) {
	t.Helper()
	var mu sync.Mutex
	perNode := map[string]int{}
	err := cc.ForEachMaster(context.Background(), func(ctx context.Context, m *redis.Client) error {
		n := assertAllKeysHaveTTL(t, m)
		mu.Lock()
		perNode[m.Options().Addr] = n
		mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for addr, n := range perNode {
		if n == 0 {
			t.Errorf("master %s holds no keys: %v", addr, perNode)
		}
	}
	if len(perNode) != 3 {
		t.Errorf("masters %v, want 3", perNode)
	}
}

// TestClusterSingleCallsRecoverFromNoScript: Allow on a fresh cluster (empty
// script caches on every node) falls back to EVAL per node.
func TestClusterSingleCallsRecoverFromNoScript(t *testing.T) {
	t.Parallel()
	cl := redistest.NewCluster(t)
	cc := cl.Client()
	s := newStore(t, cc)
	for _, r := range spreadRequests(12, 1) {
		d, err := s.AllowBatch(context.Background(), []ratelimit.Request{r})
		if err != nil || !d[0].Allowed {
			t.Fatalf("%s: %+v, %v", r.Key, d, err)
		}
	}
}

// TestClusterNodeHoldsTheKeys: Node names the master that holds a
// request's state keys, for plain identities and for those the hash tag
// replaces by their hash.
func TestClusterNodeHoldsTheKeys(t *testing.T) {
	t.Parallel()
	cl := redistest.NewCluster(t)
	cc := cl.Client()
	s := newStore(t, cc)
	ctx := context.Background()
	masters := map[string]*redis.Client{}
	var mu sync.Mutex
	if err := cc.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		masters[m.Options().Addr] = m
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	ids := []string{"", "{x}", "#y", strings.Repeat("z", MaxIdentityLen+1)}
	for i := range 30 {
		ids = append(ids, fmt.Sprintf("tenant|api|user=%d", i))
	}
	limit := limitFor(ratelimit.FixedWindow, 3, time.Hour)
	for _, id := range ids {
		req := ratelimit.Request{Key: id, Hits: 1, Limits: []ratelimit.Limit{limit}}
		if _, err := s.AllowBatch(ctx, []ratelimit.Request{req}); err != nil {
			t.Fatal(err)
		}
		node := s.Node(ctx, id)
		m, ok := masters[node]
		if !ok {
			t.Fatalf("Node(%.20q) = %q, not a master of %v", id, node, masters)
		}
		if n, err := m.Exists(ctx, requestKeys(s.prefix, req)[0]).Result(); err != nil || n != 1 {
			t.Errorf("Node(%.20q) = %s, which holds %d of its keys (%v)", id, node, n, err)
		}
	}
}
