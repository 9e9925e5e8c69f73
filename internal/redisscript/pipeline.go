package redisscript

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Call is one script command: the script, its KEYS and its ARGV.
type Call struct {
	Script Script
	Keys   []string
	Args   []any
}

// Run runs the call as Script.Run does.
func (c Call) Run(ctx context.Context, p Processor) Cmd {
	return c.Script.Run(ctx, p, c.Keys, c.Args)
}

// Pipeliner opens pipelines: *redis.Client and *redis.ClusterClient (whose
// pipelines go-redis splits per node).
type Pipeliner interface {
	Pipeline() redis.Pipeliner
}

// RunPipeline sends every call by EVALSHA in one pipeline: one round trip
// per node involved. The calls a node answers NOSCRIPT (an empty script
// cache after a restart or failover) did not run; they are sent again by
// EVAL in a second pipeline, which also loads the script there. cmds[i]
// carries calls[i]'s reply or error; no command is sent twice otherwise.
func RunPipeline(ctx context.Context, c Pipeliner, calls []Call) []Cmd {
	cmds := make([]Cmd, len(calls))
	p := c.Pipeline()
	for i, call := range calls {
		cmds[i] = call.Script.EvalSha(ctx, call.Keys, call.Args)
		_ = p.Process(ctx, cmds[i]) // queued; the error comes with Exec
	}
	_, _ = p.Exec(ctx) // the first error is also on its command
	var again redis.Pipeliner
	for i, call := range calls {
		if !IsNoScript(cmds[i].Err()) {
			continue
		}
		if again == nil {
			again = c.Pipeline()
		}
		cmds[i] = call.Script.Eval(ctx, call.Keys, call.Args)
		_ = again.Process(ctx, cmds[i])
	}
	if again != nil {
		_, _ = again.Exec(ctx)
	}
	return cmds
}
