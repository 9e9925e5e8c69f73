package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// t0 is a fixed instant aligned to a day (2023-11-15T00:00:00Z), the same
// origin as package ratelimit's tables.
const t0 = int64(1_700_006_400_000_000)

// randomKey returns a fresh identity so parallel tests never share state.
func randomKey(t testing.TB) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return t.Name() + "|" + hex.EncodeToString(b)
}

// newStore returns a Store on client with a random prefix-free setup.
func newStore(t testing.TB, c Client) *Store {
	t.Helper()
	s, err := New(c, Options{})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// clock is a settable fixed instant for the script's test-only now argument.
type clock struct{ now int64 }

func (c *clock) get() int64 { return c.now }

// fixedStore returns a store whose script decides at the instants of the
// returned clock instead of Redis's TIME.
func fixedStore(t testing.TB, c Client) (*Store, *clock) {
	t.Helper()
	s := newStore(t, c)
	clk := &clock{now: t0}
	s.now = clk.get
	return s, clk
}

// assertAllKeysHaveTTL scans every key of the server and fails on any key
// without a positive TTL.
func assertAllKeysHaveTTL(t testing.TB, c *redis.Client) int {
	t.Helper()
	ctx := context.Background()
	n := 0
	iter := c.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		n++
		ttl, err := c.PTTL(ctx, iter.Val()).Result()
		if err != nil {
			t.Fatalf("PTTL %q: %v", iter.Val(), err)
		}
		// A key that expired between SCAN and PTTL reports -2: fine.
		if ttl == -2 {
			continue
		}
		if ttl <= 0 {
			t.Errorf("key %q has no TTL (PTTL %v)", iter.Val(), ttl)
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("SCAN: %v", err)
	}
	return n
}

// limitFor returns a limit of r per period under alg.
func limitFor(alg ratelimit.Algorithm, r int64, period time.Duration) ratelimit.Limit {
	return ratelimit.Limit{Algorithm: alg, Requests: r, Period: period}
}

// standalone starts a server and returns a client of it.
func standalone(t testing.TB) (*redistest.Server, *redis.Client) {
	t.Helper()
	srv := redistest.Standalone(t)
	return srv, srv.Client()
}
