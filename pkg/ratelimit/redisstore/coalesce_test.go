package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// gate holds the first script command sent alone until released, and
// records every script command and pipeline the client sends.
type gate struct {
	release  chan struct{}
	held     atomic.Bool
	mu       sync.Mutex
	singles  int
	batches  []int      // decisions in each script pipeline
	sentKeys [][]string // KEYS of every decision, in send order
	// beforePipeline, when set, runs before a script pipeline is sent.
	beforePipeline func()
}

func newGate() *gate { return &gate{release: make(chan struct{})} }

func isScript(c redis.Cmder) bool { return c.Name() == "evalsha" || c.Name() == "eval" }

// isBatch reports a call of single.lua's batch script, whose every key is
// one decision.
func isBatch(c redis.Cmder) bool {
	a := c.Args()
	return a[1] == decideBatch.SHA() || a[1] == decideBatch.Source()
}

// record notes the decisions cmds carry and returns how many.
func (g *gate) record(cmds []redis.Cmder) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	decisions := 0
	for _, c := range cmds {
		a := c.Args()
		n := int(a[2].(int))
		keys := make([]string, n)
		for i := range keys {
			keys[i] = a[3+i].(string)
		}
		if !isBatch(c) {
			g.sentKeys = append(g.sentKeys, keys)
			decisions++
			continue
		}
		for _, k := range keys {
			g.sentKeys = append(g.sentKeys, []string{k})
		}
		decisions += n
	}
	return decisions
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !isScript(cmd) {
			return next(ctx, cmd)
		}
		if n := g.record([]redis.Cmder{cmd}); n > 1 {
			g.mu.Lock()
			g.batches = append(g.batches, n) // a batch script sent alone
			g.mu.Unlock()
			return next(ctx, cmd)
		}
		g.mu.Lock()
		g.singles++
		g.mu.Unlock()
		if g.held.CompareAndSwap(false, true) {
			<-g.release
		}
		return next(ctx, cmd)
	}
}

func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 0 || !isScript(cmds[0]) {
			return next(ctx, cmds)
		}
		n := g.record(cmds)
		g.mu.Lock()
		g.batches = append(g.batches, n)
		g.mu.Unlock()
		if g.beforePipeline != nil {
			g.beforePipeline()
		}
		return next(ctx, cmds)
	}
}

// waitQueued waits until the standalone lane of s holds n calls.
func waitQueued(t *testing.T, s *Store, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if l, ok := s.lanes.Load(nil); ok {
			l := l.(*lane)
			l.mu.Lock()
			got := len(l.queue)
			l.mu.Unlock()
			if got == n {
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("lane never held %d calls", n)
}

// TestConcurrentCallsShareOneRoundTrip: while one call is in flight, the
// calls that arrive queue up and leave together as one pipeline, and each
// gets its own correct answer.
func TestConcurrentCallsShareOneRoundTrip(t *testing.T) {
	t.Parallel()
	_, client := standalone(t)
	g := newGate()
	client.AddHook(g)
	s := newStore(t, client)
	if err := s.Ping(context.Background()); err != nil { // no NOSCRIPT pass
		t.Fatal(err)
	}
	l := limitFor(ratelimit.FixedWindow, 1, time.Hour)
	key := randomKey(t)
	const n = 20
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := s.Allow(context.Background(), fmt.Sprintf("%s|%d", key, i%(n/2)), l, 1)
			if err != nil {
				t.Error(err)
				return
			}
			if res.Allowed {
				admitted.Add(1)
			}
		}()
		if i == 0 {
			for !g.held.Load() { // the first call is in flight
				time.Sleep(time.Millisecond)
			}
		}
	}
	waitQueued(t, s, n-1)
	close(g.release)
	wg.Wait()
	// n/2 identities, each limited to 1 and asked twice.
	if got := admitted.Load(); got != n/2 {
		t.Errorf("admitted %d of %d, want %d", got, n, n/2)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.singles != 1 || len(g.batches) != 1 || g.batches[0] != n-1 {
		t.Errorf("sent %d single commands and pipelines of %v; want 1 single and one pipeline of %d", g.singles, g.batches, n-1)
	}
}

// TestMaxBatchBoundsAPipeline: a queue longer than MaxBatch leaves in
// several pipelines of at most MaxBatch.
func TestMaxBatchBoundsAPipeline(t *testing.T) {
	t.Parallel()
	_, client := standalone(t)
	g := newGate()
	client.AddHook(g)
	s, err := New(client, Options{MaxBatch: 4})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(context.Background()); err != nil { // no NOSCRIPT pass
		t.Fatal(err)
	}
	l := limitFor(ratelimit.GCRA, 100, time.Hour)
	key := randomKey(t)
	var wg sync.WaitGroup
	call := func(i int) {
		defer wg.Done()
		if _, err := s.Allow(context.Background(), fmt.Sprintf("%s|%d", key, i), l, 1); err != nil {
			t.Error(err)
		}
	}
	wg.Add(1)
	go call(0)
	for !g.held.Load() {
		time.Sleep(time.Millisecond)
	}
	for i := 1; i <= 10; i++ {
		wg.Add(1)
		go call(i)
	}
	waitQueued(t, s, 10)
	close(g.release)
	wg.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	if fmt.Sprint(g.batches) != "[4 4 2]" {
		t.Errorf("pipelines of %v, want [4 4 2]", g.batches)
	}
}

// TestAbandonedCallIsNeverSent: a call whose context ends while it waits
// for the node returns the context's error and never reaches Redis.
func TestAbandonedCallIsNeverSent(t *testing.T) {
	t.Parallel()
	_, client := standalone(t)
	g := newGate()
	client.AddHook(g)
	s := newStore(t, client)
	l := limitFor(ratelimit.FixedWindow, 10, time.Hour)
	key := randomKey(t)
	first := make(chan error, 1)
	go func() {
		_, err := s.Allow(context.Background(), key+"|first", l, 1)
		first <- err
	}()
	for !g.held.Load() {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() {
		_, err := s.Allow(ctx, key+"|gone", l, 1)
		gone <- err
	}()
	waitQueued(t, s, 1)
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned call: %v, want context.Canceled", err)
	}
	close(g.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	// A later call flies after the lane has dealt with the abandoned one.
	if _, err := s.Allow(context.Background(), key+"|after", l, 1); err != nil {
		t.Fatal(err)
	}
	goneKey := stateKey(DefaultPrefix, tagIdentity(key+"|gone"), l)
	n, err := client.Exists(context.Background(), goneKey).Result()
	if err != nil || n != 0 {
		t.Errorf("abandoned call's key exists: %d, %v; it was sent", n, err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, keys := range g.sentKeys {
		if keys[0] == goneKey {
			t.Errorf("abandoned call was sent")
		}
	}
}

// TestLostPipelineReplyIsNotRetried: a pipeline whose reply is lost fails
// every call in it, and none is sent again (go-redis would retry the
// pipeline, MaxRetries 3 here): each charged exactly once.
func TestLostPipelineReplyIsNotRetried(t *testing.T) {
	t.Parallel()
	srv, direct := standalone(t)
	var delay atomic.Int64
	client := redis.NewClient(&redis.Options{
		Addr:        slowReplies(t, srv.Addr, &delay),
		ReadTimeout: 50 * time.Millisecond,
	})
	t.Cleanup(func() { client.Close() })
	g := newGate()
	g.beforePipeline = func() { delay.Store(int64(300 * time.Millisecond)) }
	client.AddHook(g)
	s := newStore(t, client)
	if err := s.Ping(context.Background()); err != nil { // no NOSCRIPT pass
		t.Fatal(err)
	}
	l := limitFor(ratelimit.FixedWindow, 100, time.Hour)
	key := randomKey(t)
	var wg sync.WaitGroup
	const n = 8
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.Allow(context.Background(), fmt.Sprintf("%s|%d", key, i), l, 1)
		}()
		if i == 0 {
			for !g.held.Load() {
				time.Sleep(time.Millisecond)
			}
		}
	}
	waitQueued(t, s, n-1)
	close(g.release)
	wg.Wait()
	for i := 1; i < n; i++ {
		if errs[i] == nil {
			t.Errorf("call %d succeeded although its pipeline's reply was lost", i)
		}
	}
	time.Sleep(time.Second) // let every forwarded command reach Redis
	for i := 0; i < n; i++ {
		k := stateKey(DefaultPrefix, tagIdentity(fmt.Sprintf("%s|%d", key, i)), l)
		if c, err := direct.HGet(context.Background(), k, fieldCount).Result(); err != nil || c != "1" {
			t.Errorf("call %d charged %q, %v; want exactly 1", i, c, err)
		}
	}
}

// TestMaxBatchOneSendsEachCallAlone: MaxBatch 1 turns coalescing off:
// concurrent calls go out one command each, never as a pipeline.
func TestMaxBatchOneSendsEachCallAlone(t *testing.T) {
	t.Parallel()
	_, client := standalone(t)
	g := newGate()
	g.held.Store(true) // hold nothing
	client.AddHook(g)
	s, err := New(client, Options{MaxBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(context.Background()); err != nil { // no NOSCRIPT pass
		t.Fatal(err)
	}
	l := limitFor(ratelimit.GCRA, 10, time.Hour)
	key := randomKey(t)
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := s.Allow(context.Background(), key, l, 1)
			if err != nil {
				t.Error(err)
			} else if res.Allowed {
				admitted.Add(1)
			}
		}()
	}
	wg.Wait()
	if got := admitted.Load(); got != 10 {
		t.Errorf("admitted %d of 40, want 10", got)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.singles != 40 || len(g.batches) != 0 {
		t.Errorf("sent %d single commands and pipelines of %v; want 40 singles", g.singles, g.batches)
	}
}
