package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// redisEvents tells the operator about Redis trouble that metrics alone
// would hide: the first error of each kind (timeout, connection, a Redis
// error code) at WARN, then one line per kind per minute while it lasts;
// each circuit breaker opening and closing at INFO. A MOVED reply to a
// standalone client means EXTAUTHZ_REDIS_URL names a cluster node without
// EXTAUTHZ_REDIS_CLUSTER=true: that is logged at ERROR and fails readiness
// from then on, since most keys would never reach Redis.
type redisEvents struct {
	*throttledLog // errors, by store and kind
	log           *slog.Logger
	cluster       bool

	// onBreaker, when set, is also told of every breaker transition (the
	// rewarmer, warm.go).
	onBreaker func(store, node string, open bool)

	mu    sync.Mutex
	moved error
}

func newRedisEvents(log *slog.Logger, cluster bool) *redisEvents {
	return &redisEvents{throttledLog: newThrottledLog(log), log: log, cluster: cluster}
}

// onError is told of one failed Redis call of a store ("ratelimit",
// "idempotency", "inflight", "lockout") on node ("" when the client has one
// node).
func (e *redisEvents) onError(store, node string, err error) {
	if !e.cluster && isMoved(err) {
		e.wrongMode(err)
		return
	}
	kind := redisErrorKind(err)
	e.warn(store+" "+kind, "redis error", "store", store, "kind", kind, "node", node, "err", err)
}

// onChange is told of a circuit breaker opening or closing.
func (e *redisEvents) onChange(store, node string, open bool, err error) {
	if e.onBreaker != nil {
		e.onBreaker(store, node, open)
	}
	if open {
		e.log.Info("redis circuit breaker open: decisions follow the failure mode until a probe succeeds",
			"store", store, "node", node, "err", err)
		return
	}
	e.log.Info("redis circuit breaker closed: back on Redis", "store", store, "node", node)
}

// wrongMode records and logs (once) a MOVED reply on a standalone client.
func (e *redisEvents) wrongMode(err error) {
	e.mu.Lock()
	first := e.moved == nil
	if first {
		e.moved = fmt.Errorf("redis answered MOVED (%v): EXTAUTHZ_REDIS_URL names a Redis Cluster node; set EXTAUTHZ_REDIS_CLUSTER=true", err)
	}
	e.mu.Unlock()
	if first {
		e.log.Error("redis is a cluster: set EXTAUTHZ_REDIS_CLUSTER=true (keys on other nodes cannot reach Redis; /readyz fails until then)", "err", err)
	}
}

// Ready fails once Redis answered MOVED to a standalone client.
func (e *redisEvents) Ready(context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.moved
}

func isMoved(err error) bool {
	if _, ok := redis.IsMovedError(err); ok {
		return true
	}
	return strings.Contains(err.Error(), "MOVED ")
}

// redisErrorKind names an error's kind for logs: timeout, connection, or
// the Redis error code (CLUSTERDOWN, LOADING, READONLY, ...).
func redisErrorKind(err error) string {
	var rerr redis.Error
	var nerr net.Error
	switch {
	case errors.Is(err, errWaitShort):
		return "wait_short"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &nerr) && nerr.Timeout():
		return "timeout"
	case errors.As(err, &rerr):
		code, _, _ := strings.Cut(rerr.Error(), " ")
		return code
	case errors.As(err, &nerr), errors.Is(err, io.EOF):
		return "connection"
	}
	return "other"
}

// explainRedisTLS adds to a refused TLS handshake what to change: Redis
// names only the alert, and an operator who swapped envoyproxy/ratelimit
// for extauthz meets it first at warm-up.
func explainRedisTLS(err error) error {
	switch {
	case err == nil:
		return nil
	case strings.Contains(err.Error(), "tls: certificate required"):
		return fmt.Errorf("%w (Redis requires a TLS client certificate: set EXTAUTHZ_REDIS_TLS_CLIENT_CERT and _KEY, or envoyproxy/ratelimit's REDIS_TLS_CLIENT_CERT and _KEY)", err)
	case strings.Contains(err.Error(), "tls: unknown certificate authority"), strings.Contains(err.Error(), "tls: bad certificate"):
		return fmt.Errorf("%w (Redis refused the client certificate of EXTAUTHZ_REDIS_TLS_CLIENT_CERT: is it signed by a CA Redis trusts, and valid now?)", err)
	}
	return err
}
