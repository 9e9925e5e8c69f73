package redisscript_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/redisscript"
	"github.com/extauthz/extauthz/internal/redistest"
)

// incr counts its calls in KEYS[1], so a test sees how often it ran.
var incr = redisscript.New("return redis.call('INCRBY', KEYS[1], ARGV[1])")

// TestSHAIsRedis: the SHA EVALSHA sends is the one Redis names the script by.
func TestSHAIsRedis(t *testing.T) {
	t.Parallel()
	c := redistest.Standalone(t).Client()
	sha, err := c.ScriptLoad(context.Background(), incr.Source()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if sha != incr.SHA() {
		t.Fatalf("SHA %s, Redis says %s", incr.SHA(), sha)
	}
}

// TestRunFallsBackToEval: on a server whose script cache is empty (a fresh
// one, then after SCRIPT FLUSH) Run still runs the script, exactly once.
func TestRunFallsBackToEval(t *testing.T) {
	t.Parallel()
	c := redistest.Standalone(t).Client()
	ctx := context.Background()
	for i, flush := range []bool{false, false, true} {
		if flush {
			if err := c.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		n, err := incr.Run(ctx, c, []string{"k"}, []any{1}).Int64()
		if err != nil || n != int64(i+1) {
			t.Fatalf("run %d: %d, %v; want %d", i+1, n, err, i+1)
		}
	}
}

// TestRunPipelineFallsBackToEval: in a pipeline on an empty script cache,
// every call answered NOSCRIPT is sent again by EVAL and runs once; each
// command keeps its own reply.
func TestRunPipelineFallsBackToEval(t *testing.T) {
	t.Parallel()
	c := redistest.Standalone(t).Client()
	ctx := context.Background()
	other := redisscript.New("return 'other ' .. KEYS[1]")
	if err := c.ScriptLoad(ctx, other.Source()).Err(); err != nil { // cached: no NOSCRIPT
		t.Fatal(err)
	}
	calls := []redisscript.Call{
		{Script: incr, Keys: []string{"a"}, Args: []any{1}},
		{Script: other, Keys: []string{"b"}},
		{Script: incr, Keys: []string{"a"}, Args: []any{10}},
	}
	cmds := redisscript.RunPipeline(ctx, c, calls)
	want := []any{int64(1), "other b", int64(11)}
	for i, cmd := range cmds {
		if v, err := cmd.Result(); err != nil || v != want[i] {
			t.Errorf("call %d: %v, %v; want %v", i, v, err, want[i])
		}
	}
	if n, err := c.Get(ctx, "a").Int64(); err != nil || n != 11 {
		t.Errorf("a = %d, %v; want 11: each call ran exactly once", n, err)
	}
}

// TestCmdIsNeverRetried: go-redis asks a command whether it may re-send it.
func TestCmdIsNeverRetried(t *testing.T) {
	t.Parallel()
	var cmd redis.Cmder = incr.EvalSha(context.Background(), []string{"k"}, []any{1})
	nr, ok := cmd.(interface{ NoRetry() bool })
	if !ok || !nr.NoRetry() {
		t.Fatal("script command does not refuse retries")
	}
}
