package main

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/redisclient"
	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/ratelimit/inflight"
	inflightmem "github.com/extauthz/extauthz/pkg/ratelimit/inflight/memstore"
	inflightredis "github.com/extauthz/extauthz/pkg/ratelimit/inflight/redisstore"
)

// TestInFlightStore: without Redis the slots are in memory; with Redis
// they are shared, so a slot one replica took is released by another's
// store (the ext_proc stream may end on any replica).
func TestInFlightStore(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	mem, err := newInFlight(Config{}, nil, log)
	if _, ok := mem.(*inflightmem.Store); !ok || err != nil {
		t.Fatalf("without Redis: %T, %v; want *memstore.Store", mem, err)
	}

	srv := redistest.Standalone(t)
	replica := func() inflight.Store {
		client, err := redisclient.New(redisclient.Options{URL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { client.Close() })
		s, err := newInFlight(Config{KeyPrefix: "xa"}, &redisBacked{client: client, events: newRedisEvents(log, false)}, log)
		if _, ok := s.(*inflightredis.Store); !ok || err != nil {
			t.Fatalf("with Redis: %T, %v; want *redisstore.Store", s, err)
		}
		return s
	}
	a, b := replica(), replica()
	ctx := context.Background()
	slot, r, err := a.Acquire(ctx, "acme|reports", 1, time.Minute)
	if err != nil || !r.Acquired {
		t.Fatalf("Acquire on replica a: %+v, %v", r, err)
	}
	if _, r, err := b.Acquire(ctx, "acme|reports", 1, time.Minute); err != nil || r.Acquired {
		t.Fatalf("Acquire on replica b while a holds the only slot: %+v, %v; want refused", r, err)
	}
	if ok, err := b.Release(ctx, "acme|reports", slot); !ok || err != nil {
		t.Fatalf("Release on replica b: %v, %v", ok, err)
	}
	if _, r, err := b.Acquire(ctx, "acme|reports", 1, time.Minute); err != nil || !r.Acquired {
		t.Fatalf("Acquire after release: %+v, %v", r, err)
	}
}
