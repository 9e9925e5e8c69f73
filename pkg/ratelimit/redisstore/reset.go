package redisstore

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

var _ ratelimit.Resetter = (*Store)(nil)

// StateKeys returns the Redis key of each limit of r (see stateKey).
func (s *Store) StateKeys(r ratelimit.Request) []string { return requestKeys(s.prefix, r) }

// Reset deletes the state of every limit of every request: one DEL per
// request (its keys share a hash tag, so one slot), all in one pipeline. A
// limit's state is a single key whatever the algorithm (decide.lua), so
// nothing else is left behind.
func (s *Store) Reset(ctx context.Context, reqs []ratelimit.Request) error {
	if s.closed.Load() {
		return ratelimit.ErrClosed
	}
	if len(reqs) == 0 {
		return nil
	}
	pipe := s.client.Pipeline()
	for _, r := range reqs {
		keys := requestKeys(s.prefix, r)
		if len(keys) == 0 {
			continue
		}
		args := make([]any, 0, len(keys)+1)
		args = append(args, "del")
		for _, k := range keys {
			args = append(args, k)
		}
		_ = pipe.Process(ctx, redis.NewIntCmd(ctx, args...)) // queued; errors come from Exec
	}
	_, err := pipe.Exec(ctx)
	return err
}
