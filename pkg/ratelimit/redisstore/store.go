// Package redisstore keeps rate-limit state in Redis or Redis Cluster, so
// every replica of the service enforces one shared limit.
//
// Each request is decided by one Lua script (decide.lua, embedded) that reads
// Redis's own clock, evaluates every limit of the request and charges all of
// them or none, sets a TTL on every key it writes, and touches only keys under
// the request's hash tag: the same script runs on a standalone server and on
// a cluster. A batch is one pipeline, which go-redis splits per cluster node:
// one round trip per node involved. Concurrent calls to one node share
// round trips: while one is in flight the next decisions queue and leave
// together as one pipeline (coalesce.go).
//
// The answers are those of the in-process algorithms in package ratelimit,
// computed in integer microseconds.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/redisclient"
	"github.com/extauthz/extauthz/internal/redisscript"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// DefaultPrefix starts every key when Options.Prefix is empty.
const DefaultPrefix = redisclient.DefaultPrefix

// Client is what the store needs from Redis: sending commands, pipelines,
// and loading the script. Both *redis.Client and *redis.ClusterClient
// satisfy it.
type Client interface {
	Process(ctx context.Context, cmd redis.Cmder) error
	Pipeline() redis.Pipeliner
	ScriptLoad(ctx context.Context, script string) *redis.StringCmd
}

var (
	_ Client = (*redis.Client)(nil)
	_ Client = (*redis.ClusterClient)(nil)
)

// Options configures a Store.
type Options struct {
	// Prefix starts every key, followed by ":rl:". Default "xa". It must not
	// contain '{' or '}', which would move the hash tag.
	Prefix string
	// MaxBatch bounds the decisions sent to one node in one pipeline while
	// coalescing (see coalesce.go); default DefaultMaxBatch. 1 turns
	// coalescing off: every request goes out on its own at once.
	MaxBatch int
	// CallTimeout bounds each decision's wait for Redis, counted from when
	// the decision was asked for (so time queued behind a round trip
	// counts); 0 leaves only the caller's deadline. While coalescing, one
	// deadline bounds each round trip, the earliest its calls need, so a
	// decision pays for no context or timer of its own.
	CallTimeout time.Duration
}

// Store is a ratelimit.Store on Redis. It is safe for concurrent use.
type Store struct {
	client Client
	prefix string
	closed atomic.Bool
	// maxBatch and lanes drive coalescing; lanes maps a node (its
	// *redis.Client, or nil) to its *lane.
	maxBatch int
	lanes    sync.Map
	// batchScripts: the client is one server (not a cluster, whose keys
	// span slots), so coalesced one-limit decisions share one script call.
	batchScripts bool
	// timeout is Options.CallTimeout.
	timeout time.Duration
	// now, when set (tests only), gives the script a fixed instant in
	// microseconds instead of Redis's TIME.
	now func() int64
}

var _ ratelimit.Store = (*Store)(nil)

// New returns a Store over client. The store does not own the client: close
// the client after the store. New does not contact Redis, so a server that
// is down at start-up does not fail construction.
func New(client Client, opts Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client")
	}
	prefix, err := redisclient.KeyPrefix(opts.Prefix)
	if err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	opts.Prefix = prefix
	if opts.CallTimeout < 0 {
		return nil, fmt.Errorf("redisstore: CallTimeout %s must not be negative", opts.CallTimeout)
	}
	if opts.MaxBatch < 0 {
		return nil, fmt.Errorf("redisstore: MaxBatch %d must not be negative", opts.MaxBatch)
	}
	if opts.MaxBatch == 0 {
		opts.MaxBatch = DefaultMaxBatch
	}
	_, single := client.(*redis.Client)
	return &Store{client: client, prefix: opts.Prefix, maxBatch: opts.MaxBatch, batchScripts: single, timeout: opts.CallTimeout}, nil
}

// Allow decides one limit for one key.
func (s *Store) Allow(ctx context.Context, key string, limit ratelimit.Limit, hits int64) (ratelimit.Result, error) {
	return ratelimit.AllowOne(ctx, s, key, limit, hits)
}

// AllowBatch decides each request atomically (all its limits or none),
// in one pipeline: one round trip per Redis node involved. Concurrent
// calls share round trips (see coalesce.go).
func (s *Store) AllowBatch(ctx context.Context, reqs []ratelimit.Request) ([]ratelimit.Decision, error) {
	if s.closed.Load() {
		return nil, ratelimit.ErrClosed
	}
	for i, r := range reqs {
		if err := validateRequest(r); err != nil {
			return nil, fmt.Errorf("request %d: %w", i, err)
		}
	}
	leases := hasLease(reqs)
	switch {
	case len(reqs) == 0:
		return []ratelimit.Decision{}, nil
	case s.maxBatch > 1 && !leases: // leases are rare (one per slice): not coalesced
		return s.allowCoalesced(ctx, reqs)
	}
	ctx, cancel := s.bound(ctx, time.Now())
	defer cancel()
	if len(reqs) == 1 && !leases {
		return s.runOne(ctx, reqs[0])
	}
	return s.runPipelined(ctx, reqs)
}

// bound returns ctx ending at asked + CallTimeout, or ctx itself when no
// timeout is set or ctx's own deadline comes first (Envoy's filter timeout,
// sent as grpc-timeout, usually does): a timer of our own would change
// nothing there.
func (s *Store) bound(ctx context.Context, asked time.Time) (context.Context, context.CancelFunc) {
	if s.timeout <= 0 {
		return ctx, func() {}
	}
	end := asked.Add(s.timeout)
	if d, ok := ctx.Deadline(); ok && !d.After(end) {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, end)
}

// Ping loads the scripts on every master (a cluster client loads it on all
// shards), which both checks that Redis answers and spares the first
// decisions the EVAL fallback.
func (s *Store) Ping(ctx context.Context) error {
	if s.closed.Load() {
		return ratelimit.ErrClosed
	}
	for _, sc := range allScripts() {
		if err := s.client.ScriptLoad(ctx, sc.Source()).Err(); err != nil {
			return fmt.Errorf("redisstore: load script: %w", err)
		}
	}
	return nil
}

// Close marks the store closed; later calls return ratelimit.ErrClosed. It
// does not close the client. Safe to call twice.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}

// runOne runs one request with EVALSHA, falling back to EVAL on NOSCRIPT.
func (s *Store) runOne(ctx context.Context, req ratelimit.Request) ([]ratelimit.Decision, error) {
	keys, args := requestKeys(s.prefix, req), scriptArgs(req, s.fixedNow())
	cmd := scriptFor(args).Run(ctx, s.client, keys, args)
	if err := cmd.Err(); err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	d, err := parseReply(cmd.Val(), make([]ratelimit.Result, len(req.Limits)))
	if err != nil {
		return nil, err
	}
	return []ratelimit.Decision{d}, nil
}

// runPipelined sends every request as EVALSHA in one pipeline. A node whose
// script cache is empty (restart, failover, new shard) answers NOSCRIPT;
// those requests are re-sent with EVAL, which also loads the script there.
func (s *Store) runPipelined(ctx context.Context, reqs []ratelimit.Request) ([]ratelimit.Decision, error) {
	now := s.fixedNow()
	calls := make([]redisscript.Call, len(reqs))
	for i, r := range reqs {
		calls[i] = s.callFor(r, now)
	}
	cmds := redisscript.RunPipeline(ctx, s.client, calls)
	out := make([]ratelimit.Decision, len(reqs))
	for i, c := range cmds {
		v, err := c.Result()
		if err != nil {
			return nil, fmt.Errorf("redisstore: request %d: %w", i, err)
		}
		if out[i], err = parseReply(v, make([]ratelimit.Result, len(reqs[i].Limits))); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (s *Store) fixedNow() int64 {
	if s.now == nil {
		return 0
	}
	return s.now()
}
