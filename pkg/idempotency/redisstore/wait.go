package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/redisscript"
)

// Wait narrows the window in which a failover loses a completed record.
// Redis replicates asynchronously: a master that dies right after Complete
// may take the record with it, its replica is promoted without it, and a
// retry of the request runs again. With Replicas > 0, Complete sends WAIT
// right after the script, on the same connection, so it returns once that
// many replicas have the record or Timeout has passed. WAIT cannot make
// Redis strongly consistent (a replica may still be promoted without the
// record when the wait timed out, or when the master failed during it); it
// makes the loss rarer, at the cost of one replication round trip per
// Complete.
type Wait struct {
	// Replicas is how many replicas must acknowledge; 0 disables WAIT.
	Replicas int
	// Timeout bounds the wait; required when Replicas > 0, and below the
	// client's read timeout. A timed-out wait is not an error: the record
	// is stored on the master.
	Timeout time.Duration
	// Short, when set, is told when fewer replicas than Replicas
	// acknowledged within Timeout (callers log it).
	Short func(key string, acked int64)
}

// nodeClient is what WAIT needs: the one server that holds a key, to send
// the script and WAIT on one of its connections (WAIT counts the writes of
// its own connection).
type nodeClient interface {
	MasterForKey(ctx context.Context, key string) (*redis.Client, error)
}

func (w Wait) check(client Processor) error {
	if w.Replicas == 0 {
		return nil
	}
	if w.Replicas < 0 || w.Timeout < time.Millisecond {
		return fmt.Errorf("idempotency redisstore: Wait needs Replicas >= 0 and a Timeout of 1ms or more, got %d, %s", w.Replicas, w.Timeout)
	}
	switch client.(type) {
	case *redis.Client, nodeClient:
		return nil
	}
	return fmt.Errorf("idempotency redisstore: Wait needs a *redis.Client or *redis.ClusterClient, got %T", client)
}

// runComplete runs complete.lua on key, followed by WAIT when configured.
func (s *Store) runComplete(ctx context.Context, key string, args ...any) (any, error) {
	keys := []string{key}
	if s.wait.Replicas == 0 {
		return completeScript.Run(ctx, s.client, keys, args).Result()
	}
	node, err := s.master(ctx, key)
	if err != nil {
		return nil, err
	}
	v, acked, err := s.completeWait(ctx, node, completeScript.EvalSha(ctx, keys, args))
	if redisscript.IsNoScript(err) {
		// The script did not run: sending it in full is safe.
		v, acked, err = s.completeWait(ctx, node, completeScript.Eval(ctx, keys, args))
	}
	if err == nil && acked < int64(s.wait.Replicas) && s.wait.Short != nil {
		s.wait.Short(key, acked)
	}
	return v, err
}

// completeWait sends the script command and WAIT in one pipeline, hence on
// one connection, and returns the script's reply and the replicas that
// acknowledged.
func (s *Store) completeWait(ctx context.Context, node *redis.Client, cmd redisscript.Cmd) (any, int64, error) {
	pipe := node.Pipeline()
	_ = pipe.Process(ctx, cmd)
	wait := pipe.Do(ctx, "WAIT", s.wait.Replicas, s.wait.Timeout.Milliseconds())
	_, _ = pipe.Exec(ctx)
	v, err := cmd.Result()
	if err != nil {
		return nil, 0, err
	}
	acked, err := wait.Int64()
	if err != nil {
		// The record is written: a failed WAIT only means fewer copies.
		return v, 0, nil
	}
	return v, acked, nil
}

// master returns the client of the server that holds key.
func (s *Store) master(ctx context.Context, key string) (*redis.Client, error) {
	switch c := s.client.(type) {
	case *redis.Client:
		return c, nil
	case nodeClient:
		return c.MasterForKey(ctx, key)
	}
	return nil, fmt.Errorf("idempotency redisstore: no WAIT on %T", s.client) // New refuses it
}
