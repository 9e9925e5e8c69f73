package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// TestOneLimitCallAllocates: a one-limit decision's call costs the call
// itself (its keys, args and results inside), its done channel, its key
// and the period boxed among its args (above 255, as most are); reading
// the reply into it costs nothing.
func TestOneLimitCallAllocates(t *testing.T) {
	// Never dialled: building a call does not talk to Redis.
	s := newStore(t, redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}))
	req := ratelimit.Request{Key: "tenant|api|user=1", Hits: 1,
		Limits: []ratelimit.Limit{limitFor(ratelimit.FixedWindow, 100, time.Second)}}
	ctx, asked := context.Background(), time.Now()
	var c *call
	if n := testing.AllocsPerRun(100, func() { c = s.newCall(ctx, req, 0, asked) }); n > 4 {
		t.Errorf("newCall allocates %.0f times, want at most 4", n)
	}
	var reply any = []any{int64(1), int64(1), int64(100), int64(99), int64(1000), int64(0)}
	if n := testing.AllocsPerRun(100, func() { c.dec[0], c.err = parseReply(reply, c.results) }); n != 0 {
		t.Errorf("parseReply allocates %.0f times, want none", n)
	}
	if c.err != nil || !c.dec[0].Allowed || c.dec[0].Results[0].Remaining != 99 {
		t.Errorf("parsed %+v, %v", c.dec[0], c.err)
	}
}
