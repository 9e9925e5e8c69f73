package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/redisclient"
	idemredis "github.com/extauthz/extauthz/pkg/idempotency/redisstore"
	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/allotment"
	"github.com/extauthz/extauthz/pkg/ratelimit/failover"
	"github.com/extauthz/extauthz/pkg/ratelimit/fleet"
	inflightredis "github.com/extauthz/extauthz/pkg/ratelimit/inflight/redisstore"
	lockoutredis "github.com/extauthz/extauthz/pkg/ratelimit/lockout/redisstore"
	"github.com/extauthz/extauthz/pkg/ratelimit/memstore"
	"github.com/extauthz/extauthz/pkg/ratelimit/overlimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/quota/quotaredis"
	"github.com/extauthz/extauthz/pkg/ratelimit/redisstore"
)

// newRedisStore builds the Redis-backed stack: the Redis store, the failure
// wrapper (fall back to an in-process store, or deny) and, unless disabled,
// the local over-limit cache in front. Nothing here contacts Redis: a Redis
// that is down at start-up makes /readyz say so, not the process exit.
func newRedisStore(cfg Config, deps storeDeps) (ratelimit.Store, error) {
	mode, err := failover.ParseMode(cfg.FailureMode)
	if err != nil {
		return nil, fmt.Errorf("EXTAUTHZ_FAILURE_MODE: %w", err)
	}
	client, err := redisclient.New(redisclient.Options{
		URL:                   cfg.RedisURL,
		Cluster:               cfg.RedisCluster,
		SentinelAddrs:         cfg.sentinelAddrs(),
		SentinelMaster:        cfg.RedisSentinelMaster,
		SentinelPassword:      cfg.RedisSentinelPassword,
		PoolSize:              cfg.RedisPoolSize,
		DialTimeout:           cfg.RedisDialTimeout,
		ReadTimeout:           cfg.RedisReadTimeout,
		WriteTimeout:          cfg.RedisWriteTimeout,
		TLSCAFile:             cfg.RedisTLSCAFile,
		TLSInsecureSkipVerify: cfg.RedisTLSInsecureSkipVerify,
		TLSClientCertFile:     cfg.RedisTLSClientCert,
		TLSClientKeyFile:      cfg.RedisTLSClientKey,
	})
	if err != nil {
		return nil, fmt.Errorf("EXTAUTHZ_REDIS_*: %w", err)
	}
	// go-redis logs dial failures itself, through a process-wide logger;
	// route them to ours at debug level (failures are counted in metrics
	// and reported by /readyz).
	redis.SetLogger(redisLogger{deps.Logger})
	events := newRedisEvents(deps.Logger, cfg.RedisCluster)
	// Every script the process runs on Redis: rate limits, idempotency,
	// RLQS demands, max_in_flight slots, lockouts and the replica count.
	scripts := slices.Concat(redisstore.Scripts(), idemredis.Scripts(), quotaredis.Scripts(), inflightredis.Scripts(), lockoutredis.Scripts(), fleet.Scripts())
	warm := func(ctx context.Context) error {
		return explainRedisTLS(redisclient.Warm(ctx, client, scripts, cfg.warmConnCount()))
	}
	rw := newRewarmer(warm, cfg.warmAttemptTimeout())
	events.onBreaker = rw.breaker
	presence, err := fleet.New(client, fleet.Options{Prefix: cfg.KeyPrefix, Registerer: deps.Registerer,
		OnError: func(err error) { events.onError("replicas", "", err) }})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("EXTAUTHZ_KEY_PREFIX: %w", err), client.Close())
	}
	store, err := redisStack(client, mode, cfg, deps, events, fallbackReplicas(cfg, presence))
	if err != nil {
		return nil, errors.Join(err, client.Close())
	}
	withRegions, err := regionStack(store, client, cfg, deps)
	if err != nil {
		return nil, errors.Join(err, store.Close(), client.Close())
	}
	store = withRegions
	// The URL may hold a password: log only what it selects.
	deps.Logger.Info("rate limit store", "kind", "redis", "cluster", cfg.RedisCluster,
		"sentinels", cfg.sentinelAddrs(), "sentinel_master", cfg.RedisSentinelMaster, "failure_mode", mode, "local_cache", cfg.LocalCache, "key_prefix", cfg.KeyPrefix)
	return &redisBacked{Store: store, client: client, events: events, warm: warm, rewarm: rw, presence: presence}, nil
}

// fallbackReplicas is what the fail-open fallback divides each limit by:
// EXTAUTHZ_FALLBACK_REPLICAS when set, else the live replicas presence last
// counted in Redis (0, read as 1, until it first counts: a replica that
// never reached Redis has no count to go by; docs/redis.md states what that
// costs during an outage).
func fallbackReplicas(cfg Config, presence *fleet.Presence) func() int {
	if n := cfg.FallbackReplicas; n > 0 {
		return func() int { return n }
	}
	return presence.Count
}

// redisStack wraps the Redis store in the failure mode, the allotments
// (limits with consistency: allotment lease slices through the failure
// mode, so a lease follows it like any decision) and the local cache:
// overlimit(allotment(failover(redis))).
//
// replicas is the fallback's divisor (failover.Options.Replicas): each
// replica's fallback holds its share of every limit.
func redisStack(client redis.UniversalClient, mode failover.Mode, cfg Config, deps storeDeps, events *redisEvents, replicas func() int) (ratelimit.Store, error) {
	// The store bounds each decision's wait itself (one deadline per round
	// trip while coalescing), so failover adds no context and timer per
	// decision of its own.
	rs, err := redisstore.New(client, redisstore.Options{Prefix: cfg.KeyPrefix, MaxBatch: max(cfg.RedisMaxBatch, 1), CallTimeout: cfg.RedisCallTimeout})
	if err != nil {
		return nil, fmt.Errorf("EXTAUTHZ_KEY_PREFIX: %w", err)
	}
	var fallback ratelimit.Store
	if mode == failover.Open {
		if fallback, err = memstore.New(memstore.Options{Now: deps.Now, MaxKeys: cfg.MemoryMaxKeys}); err != nil {
			return nil, fmt.Errorf("fallback memory store: %w", err)
		}
	}
	fs, err := failover.New(rs, failover.Options{
		Mode: mode, Fallback: fallback, Registerer: deps.Registerer, Now: deps.Now,
		FailureThreshold: cfg.RedisBreakerThreshold, CoolDown: cfg.RedisBreakerPause, Replicas: replicas,
		OnError:  func(node string, err error) { events.onError("ratelimit", node, err) },
		OnChange: func(node string, open bool, err error) { events.onChange("ratelimit", node, open, err) },
	})
	if err != nil {
		if fallback != nil {
			err = errors.Join(err, fallback.Close()) // stops its sweep goroutine
		}
		return nil, err
	}
	al, err := allotment.New(fs, allotment.Options{Registerer: deps.Registerer, Now: deps.Now, MaxSlices: cfg.AllotmentMaxSlices})
	if err != nil {
		return nil, errors.Join(err, fs.Close())
	}
	if !cfg.LocalCache {
		return al, nil
	}
	cached, err := overlimit.New(al, overlimit.Options{Registerer: deps.Registerer, Now: deps.Now})
	if err != nil {
		return nil, errors.Join(err, al.Close())
	}
	return cached, nil
}

// The Redis store routes per cluster node: failover keeps a breaker per
// master and refreshes the slot map on failures.
var _ failover.Router = (*redisstore.Store)(nil)

// redisLogger adapts slog to go-redis's logging interface.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
}

// redisBacked closes the Redis client after the stores that use it, and
// passes readiness through.
type redisBacked struct {
	ratelimit.Store
	client redis.UniversalClient
	events *redisEvents
	// warm dials connections and loads both stores' scripts (the
	// idempotency store shares client) on every master; rewarm does it
	// again while a breaker is open.
	warm   func(context.Context) error
	rewarm *rewarmer
	// presence counts the live replicas for the fallback; it beats until
	// Close, which removes this replica from the count.
	presence *fleet.Presence
}

// Warm dials connections and loads both stores' scripts on every master
// (redisclient.Warm), so that the first calls after readiness are decided
// on Redis, not in the failure mode.
//
// The replica starts counting itself in Redis (fleet) once that succeeds:
// its first beat then finds its script loaded, and a replica whose Redis
// never answered has nothing to count (its fallback divides by 1, or by
// EXTAUTHZ_FALLBACK_REPLICAS).
func (r *redisBacked) Warm(ctx context.Context) error {
	if err := r.warm(ctx); err != nil {
		return err
	}
	if r.presence != nil {
		r.presence.Start()
	}
	return nil
}

func (r *redisBacked) Ready(ctx context.Context) error {
	if err := r.events.Ready(ctx); err != nil {
		return err
	}
	if rd, ok := r.Store.(readiness); ok {
		return rd.Ready(ctx)
	}
	return nil
}

func (r *redisBacked) Close() error {
	if r.presence != nil {
		r.presence.Close() // before the client it uses
	}
	r.rewarm.close()
	return errors.Join(r.Store.Close(), r.client.Close())
}
