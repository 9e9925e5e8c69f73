// Package redisstore is an inflight.Store on Redis or Redis Cluster, shared
// by every replica so that a concurrency limit holds across the fleet.
//
// Each key is one sorted set, `<prefix>:if:{<escaped key>}`
// (inflight.StorageKey inside the braces, so it lives in one cluster slot):
// member = slot token, score = the slot's expiry in Unix milliseconds on
// Redis's clock (TIME). Each operation is one Lua script that prunes expired
// slots, then counts, adds, renews or removes, atomically on the server, so
// it runs unchanged on Redis Cluster. The key's own TTL is its latest slot
// expiry, so an idle key vanishes.
//
// Scripts are never re-sent by go-redis (internal/redisscript). A lost
// reply to Acquire may have taken a slot the caller never learns of: that
// slot is held until its ttl runs out, then frees itself.
package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/redisclient"
	"github.com/extauthz/extauthz/internal/redisscript"
	"github.com/extauthz/extauthz/pkg/ratelimit/inflight"
)

var (
	//go:embed acquire.lua
	acquireSrc string
	//go:embed renew.lua
	renewSrc string
	//go:embed release.lua
	releaseSrc string

	acquireScript = redisscript.New(acquireSrc)
	renewScript   = redisscript.New(renewSrc)
	releaseScript = redisscript.New(releaseSrc)
)

// Scripts returns the Lua source of every script the store runs, for
// loading them on every master before traffic arrives.
func Scripts() []string { return []string{acquireSrc, renewSrc, releaseSrc, heldSrc} }

// Processor runs one command: *redis.Client and *redis.ClusterClient.
type Processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// DefaultPrefix starts every key unless Options.Prefix is set.
const DefaultPrefix = redisclient.DefaultPrefix

// Options configure a Store. The zero value takes every default.
type Options struct {
	// Prefix starts every key; default "xa". It must not contain '{' or '}'.
	Prefix string
}

// ErrUnexpectedReply means Redis answered a script with a reply of the
// wrong shape (another script under the same SHA, or a proxy).
var ErrUnexpectedReply = errors.New("inflight redisstore: unexpected reply")

// Store is an inflight.Store on Redis. It does not own the client.
type Store struct {
	client Processor
	prefix string
}

var _ inflight.Store = (*Store)(nil)

// New returns a Store over client, a *redis.Client or *redis.ClusterClient.
func New(client Processor, o Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("inflight redisstore: nil client")
	}
	prefix, err := redisclient.KeyPrefix(o.Prefix)
	if err != nil {
		return nil, fmt.Errorf("inflight redisstore: %w", err)
	}
	return &Store{client: client, prefix: prefix}, nil
}

// Key returns the Redis key of key.
func (s *Store) Key(key string) string {
	return s.prefix + ":if:{" + inflight.StorageKey(key) + "}"
}

// Acquire implements inflight.Store.
func (s *Store) Acquire(ctx context.Context, key string, limit int, ttl time.Duration) (inflight.Slot, inflight.Result, error) {
	if err := inflight.CheckAcquire(limit, ttl); err != nil {
		return "", inflight.Result{}, err
	}
	slot := inflight.NewSlot()
	v, err := acquireScript.Run(ctx, s.client, []string{s.Key(key)}, []any{string(slot), limit, ms(ttl)}).Result()
	if err != nil {
		return "", inflight.Result{}, fmt.Errorf("inflight acquire: %w", err)
	}
	arr, ok := v.([]any)
	if !ok || len(arr) != 3 {
		return "", inflight.Result{}, fmt.Errorf("%w: %v", ErrUnexpectedReply, v)
	}
	var n [3]int64
	for i, e := range arr {
		if n[i], ok = e.(int64); !ok {
			return "", inflight.Result{}, fmt.Errorf("%w: element %d is %T", ErrUnexpectedReply, i, e)
		}
	}
	r := inflight.Result{Acquired: n[0] == 1, InFlight: int(n[1]), Limit: limit}
	if !r.Acquired {
		r.RetryAfter = time.Duration(max(n[2], 1)) * time.Millisecond
		return "", r, nil
	}
	return slot, r, nil
}

// Renew implements inflight.Store.
func (s *Store) Renew(ctx context.Context, key string, slot inflight.Slot, ttl time.Duration) (bool, error) {
	if err := inflight.CheckTTL(ttl); err != nil {
		return false, err
	}
	v, err := renewScript.Run(ctx, s.client, []string{s.Key(key)}, []any{string(slot), ms(ttl)}).Result()
	return flag("renew", v, err)
}

// Release implements inflight.Store.
func (s *Store) Release(ctx context.Context, key string, slot inflight.Slot) (bool, error) {
	v, err := releaseScript.Run(ctx, s.client, []string{s.Key(key)}, []any{string(slot)}).Result()
	return flag("release", v, err)
}

// flag maps a 0/1 script reply to a bool.
func flag(op string, v any, err error) (bool, error) {
	if err != nil {
		return false, fmt.Errorf("inflight %s: %w", op, err)
	}
	switch v {
	case int64(1):
		return true, nil
	case int64(0):
		return false, nil
	}
	return false, fmt.Errorf("%w: %v", ErrUnexpectedReply, v)
}

// ms renders d as whole milliseconds, rounded up (ttls are checked >= 1ms).
func ms(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Millisecond-1)/time.Millisecond), 10)
}
