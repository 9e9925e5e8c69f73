// Package redisscript runs Lua scripts on Redis the way both Redis stores
// (rate limits and idempotency) need them run: by EVALSHA, falling back to
// EVAL when the server does not hold the script, as commands that go-redis
// never re-sends on its own. A script call whose reply was lost may already
// have charged hits or written a record; sending it again is the caller's
// decision, never the client's.
package redisscript

import (
	"context"
	"crypto/sha1" //nolint:gosec // EVALSHA names scripts by SHA-1
	"encoding/hex"

	"github.com/redis/go-redis/v9"
)

// Script is Lua source and the SHA-1 that EVALSHA names it by.
type Script struct {
	src, sha string
	// shaArg is sha boxed once as a command argument: boxing it per
	// EVALSHA would be an allocation each.
	shaArg any
}

// New returns the Script of src.
func New(src string) Script {
	sum := sha1.Sum([]byte(src)) //nolint:gosec // EVALSHA names scripts by SHA-1
	sha := hex.EncodeToString(sum[:])
	return Script{src: src, sha: sha, shaArg: sha}
}

// Source returns the Lua source, what SCRIPT LOAD and EVAL send.
func (s Script) Source() string { return s.src }

// SHA returns the hex SHA-1 of the source, what EVALSHA sends.
func (s Script) SHA() string { return s.sha }

// Cmd is a script command that go-redis must never re-send on its own: the
// cluster client retries timed-out commands even with MaxRetries -1, and a
// script whose reply was lost may already have run. Failures go to the
// caller instead.
type Cmd struct{ *redis.Cmd }

// NoRetry tells go-redis not to retry the command.
func (Cmd) NoRetry() bool { return true }

// EvalSha builds `EVALSHA sha len(keys) keys... args...`.
func (s Script) EvalSha(ctx context.Context, keys []string, args []any) Cmd {
	return command(ctx, "evalsha", s.shaArg, keys, args)
}

// Eval builds `EVAL source len(keys) keys... args...`, which also loads the
// script on the server that runs it.
func (s Script) Eval(ctx context.Context, keys []string, args []any) Cmd {
	return command(ctx, "eval", s.src, keys, args)
}

func command(ctx context.Context, verb string, script any, keys []string, args []any) Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, verb, script, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	return Cmd{redis.NewCmd(ctx, append(a, args...)...)}
}

// Processor runs one command: *redis.Client and *redis.ClusterClient.
type Processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// Run runs s by EVALSHA, and by EVAL when the server answers NOSCRIPT (a
// restart, a failover, a new shard, SCRIPT FLUSH): then the script did not
// run, so sending it again is safe. The reply or error is on the returned
// command.
func (s Script) Run(ctx context.Context, c Processor, keys []string, args []any) Cmd {
	cmd := s.EvalSha(ctx, keys, args)
	if err := c.Process(ctx, cmd); IsNoScript(err) {
		cmd = s.Eval(ctx, keys, args)
		_ = c.Process(ctx, cmd) // the error is on cmd
	}
	return cmd
}

// IsNoScript reports a NOSCRIPT reply: the node does not hold the script,
// so the command did not run. The nil check first keeps the common case
// free: redis.HasErrorPrefix allocates on every call, error or not.
func IsNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}
