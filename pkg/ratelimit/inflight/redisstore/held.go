package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/extauthz/extauthz/internal/redisscript"
	"github.com/extauthz/extauthz/pkg/ratelimit/inflight"
)

var (
	//go:embed held.lua
	heldSrc    string
	heldScript = redisscript.New(heldSrc)
)

var _ inflight.Inspector = (*Store)(nil)

// Held implements inflight.Inspector: one read-only script on Redis's
// clock, so it counts exactly the slots Acquire would.
func (s *Store) Held(ctx context.Context, key string) (inflight.Held, error) {
	rk := s.Key(key)
	v, err := heldScript.Run(ctx, s.client, []string{rk}, nil).Result()
	if err != nil {
		return inflight.Held{}, fmt.Errorf("inflight held: %w", err)
	}
	arr, ok := v.([]any)
	if !ok || len(arr) != 2 {
		return inflight.Held{}, fmt.Errorf("%w: %v", ErrUnexpectedReply, v)
	}
	n, ok1 := arr[0].(int64)
	next, ok2 := arr[1].(int64)
	if !ok1 || !ok2 {
		return inflight.Held{}, fmt.Errorf("%w: %v", ErrUnexpectedReply, v)
	}
	return inflight.Held{Slots: int(n), NextExpiry: time.Duration(next) * time.Millisecond, Where: rk}, nil
}
