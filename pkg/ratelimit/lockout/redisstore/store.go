// Package redisstore is a lockout.Store on Redis (standalone, Sentinel or
// Cluster), shared by every replica so that a lockout holds across the
// fleet.
//
// Each key is one hash, `<prefix>:lock:{<escaped key>}` (lockout.StorageKey
// inside the braces, so it lives in one cluster slot): n (trips), d (the
// latest lockout, ms), u (when it ends, ms on Redis's clock, TIME). Trip is
// one Lua script that reads, decides and writes atomically on the server,
// so concurrent trips from any replica count as if they came one by one,
// and it runs unchanged on Redis Cluster. The key expires Policy.Forget
// after its lockout ends, which is how trips are forgotten.
//
// Scripts are never re-sent by go-redis (internal/redisscript). A lost
// reply to Trip may have counted the trip: the caller learns of it from
// the next Locked.
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
	"github.com/extauthz/extauthz/pkg/ratelimit/lockout"
)

var (
	//go:embed trip.lua
	tripSrc string
	//go:embed locked.lua
	lockedSrc string

	tripScript   = redisscript.New(tripSrc)
	lockedScript = redisscript.New(lockedSrc)
)

// Scripts returns the Lua source of every script the store runs, for
// loading them on every master before traffic arrives.
func Scripts() []string { return []string{tripSrc, lockedSrc} }

// Processor runs one command: *redis.Client (standalone, or Sentinel's
// failover client) and *redis.ClusterClient.
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
var ErrUnexpectedReply = errors.New("lockout redisstore: unexpected reply")

// Store is a lockout.Store on Redis. It does not own the client.
type Store struct {
	client Processor
	prefix string
}

var _ lockout.Store = (*Store)(nil)

// New returns a Store over client, a *redis.Client or *redis.ClusterClient.
func New(client Processor, o Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("lockout redisstore: nil client")
	}
	prefix, err := redisclient.KeyPrefix(o.Prefix)
	if err != nil {
		return nil, fmt.Errorf("lockout redisstore: %w", err)
	}
	return &Store{client: client, prefix: prefix}, nil
}

// Key returns the Redis key of key.
func (s *Store) Key(key string) string {
	return s.prefix + ":lock:{" + lockout.StorageKey(key) + "}"
}

// Locked implements lockout.Store.
func (s *Store) Locked(ctx context.Context, key string) (time.Duration, error) {
	v, err := lockedScript.Run(ctx, s.client, []string{s.Key(key)}, nil).Result()
	if err != nil {
		return 0, fmt.Errorf("lockout locked: %w", err)
	}
	left, ok := v.(int64)
	if !ok || left < 0 {
		return 0, fmt.Errorf("%w: %v", ErrUnexpectedReply, v)
	}
	return time.Duration(left) * time.Millisecond, nil
}

// Trip implements lockout.Store.
func (s *Store) Trip(ctx context.Context, key string, p lockout.Policy) (time.Duration, int64, error) {
	if err := p.Validate(); err != nil {
		return 0, 0, err
	}
	args := []any{
		p.Initial.Milliseconds(),
		strconv.FormatFloat(p.Factor, 'g', -1, 64), // read back by Lua as the same float64
		p.Max.Milliseconds(),
		p.ForgetAfter().Milliseconds(),
	}
	v, err := tripScript.Run(ctx, s.client, []string{s.Key(key)}, args).Result()
	if err != nil {
		return 0, 0, fmt.Errorf("lockout trip: %w", err)
	}
	arr, ok := v.([]any)
	if !ok || len(arr) != 2 {
		return 0, 0, fmt.Errorf("%w: %v", ErrUnexpectedReply, v)
	}
	d, ok1 := arr[0].(int64)
	n, ok2 := arr[1].(int64)
	if !ok1 || !ok2 || d <= 0 || n < 1 {
		return 0, 0, fmt.Errorf("%w: %v", ErrUnexpectedReply, v)
	}
	return time.Duration(d) * time.Millisecond, n, nil
}

// Close implements lockout.Store. It does nothing: the client belongs to
// the caller, who closes it.
func (s *Store) Close() error { return nil }
