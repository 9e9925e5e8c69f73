package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/extauthz/extauthz/internal/redisscript"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

var _ ratelimit.Resetter = (*Store)(nil)

// StateKeys returns the Redis key of each limit of r (see stateKey).
func (s *Store) StateKeys(r ratelimit.Request) []string { return requestKeys(s.prefix, r) }

// Reset resets the state of every limit of every request: one reset.lua
// call per limit, all in one pipeline. A limit's state is a single key
// whatever the algorithm (decide.lua), so nothing else is left behind;
// what allotment leases recorded in the limit's ledger and their holders
// may still use stays charged (reset.lua), since they use it without
// asking Redis again.
func (s *Store) Reset(ctx context.Context, reqs []ratelimit.Request) error {
	if s.closed.Load() {
		return ratelimit.ErrClosed
	}
	var calls []redisscript.Call
	clock := ""
	if now := s.fixedNow(); now > 0 {
		clock = strconv.FormatInt(now, 10)
	}
	for _, r := range reqs {
		for i, key := range requestKeys(s.prefix, r) {
			l := r.Limits[i]
			calls = append(calls, redisscript.Call{Script: resetScript, Keys: []string{key, ledgerKey(key)},
				Args: []any{algCodes[l.Algorithm.OrDefault()], l.Requests, l.Period.Microseconds(), clock}})
		}
	}
	if len(calls) == 0 {
		return nil
	}
	for _, c := range redisscript.RunPipeline(ctx, s.client, calls) {
		if err := c.Err(); err != nil {
			return fmt.Errorf("redisstore: reset: %w", err)
		}
	}
	return nil
}
