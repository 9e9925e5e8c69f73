package redisstore_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/idempotency/redisstore"
	"github.com/extauthz/extauthz/pkg/idempotency/storetest"
)

// client is what the tests need of a standalone or cluster client.
type client interface {
	redisstore.Processor
	redis.Scripter
	redis.Cmdable
}

// storeOn pairs a store with its client, for the harness hooks.
type storeOn struct {
	*redisstore.Store
	c client
}

const maxBody = 256 << 10

func harness(c client) storetest.Harness {
	return storetest.Harness{
		New: func(t *testing.T) idempotency.Store {
			s, err := redisstore.New(c, redisstore.Options{Prefix: "test", MaxBodyBytes: maxBody})
			if err != nil {
				t.Fatal(err)
			}
			return storeOn{s, c}
		},
		Expire:       expire,
		MaxBodyBytes: maxBody,
	}
}

// expire lets Redis expire the record for real: its TTL is cut to 1ms and
// the test waits until Redis no longer has the key.
func expire(t *testing.T, s idempotency.Store, scope, key string) {
	t.Helper()
	so := s.(storeOn)
	k, ctx := so.Key(scope, key), context.Background()
	if err := so.c.PExpire(ctx, k, time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for so.c.Exists(ctx, k).Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("key %s did not expire", k)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestStandalone(t *testing.T) {
	c := redistest.Standalone(t).Client()
	t.Run("Suite", func(t *testing.T) { storetest.Run(t, harness(c)) })
	t.Run("EveryKeyHasATTL", func(t *testing.T) {
		testTTLs(t, c, func(ctx context.Context, f func(redis.Cmdable) error) error { return f(c) })
	})
	t.Run("LayoutAndCompression", func(t *testing.T) { testLayout(t, c) })
}

func TestCluster(t *testing.T) {
	cl := redistest.NewCluster(t)
	c := cl.Client()
	t.Run("Suite", func(t *testing.T) { storetest.Run(t, harness(c)) })
	t.Run("EveryKeyHasATTL", func(t *testing.T) {
		testTTLs(t, c, func(ctx context.Context, f func(redis.Cmdable) error) error {
			return c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return f(m) })
		})
	})
}

// testTTLs drives keys through every state and then checks, with SCAN and
// PTTL on every node, that no key of the store lacks a TTL.
func testTTLs(t *testing.T, c client, eachNode func(context.Context, func(redis.Cmdable) error) error) {
	ctx := context.Background()
	s, err := redisstore.New(c, redisstore.Options{Prefix: "ttl"})
	if err != nil {
		t.Fatal(err)
	}
	fp := idempotency.NewFingerprint("POST", "/", nil, nil)
	ttls := idempotency.TTLs{Lease: 30 * time.Second, Record: time.Hour}
	for i, k := range []string{"in-progress", "completed", "renewed", "released", "mismatch", "replayed"} {
		o, err := s.Begin(ctx, "t", k, fp, ttls)
		if err != nil || o.Kind != idempotency.Acquired {
			t.Fatalf("Begin %s: %v %v", k, o.Kind, err)
		}
		switch i {
		case 1, 5:
			err = s.Complete(ctx, o.Lease, idempotency.Response{Status: 201, Body: bytes.Repeat([]byte("x"), 5000)})
		case 2:
			err = s.Renew(ctx, o.Lease)
		case 3:
			err = s.Release(ctx, o.Lease)
		case 4:
			_, err = s.Begin(ctx, "t", k, idempotency.NewFingerprint("PUT", "/", nil, nil), ttls)
		}
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
	}
	if _, err := s.Begin(ctx, "t", "replayed", fp, ttls); err != nil {
		t.Fatal(err)
	}
	var seen atomic.Int64 // nodes are scanned concurrently
	err = eachNode(ctx, func(n redis.Cmdable) error {
		iter := n.Scan(ctx, 0, "ttl:*", 100).Iterator()
		for iter.Next(ctx) {
			seen.Add(1)
			ttl, err := n.PTTL(ctx, iter.Val()).Result()
			if err != nil {
				return err
			}
			if ttl <= 0 {
				t.Errorf("key %s has PTTL %s, want a TTL", iter.Val(), ttl)
			}
			if strings.HasSuffix(iter.Val(), "completed}") && ttl <= 30*time.Second {
				t.Errorf("completed key %s has PTTL %s, want the record TTL", iter.Val(), ttl)
			}
		}
		return iter.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen.Load() != 5 { // every key but the released one
		t.Fatalf("scanned %d keys, want 5", seen.Load())
	}
}

// testLayout pins the documented Redis layout: one hash per key, the key
// shape, the states, and gzip for large compressible bodies.
func testLayout(t *testing.T, c client) {
	ctx := context.Background()
	s, err := redisstore.New(c, redisstore.Options{Prefix: "lay"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Key("acme|x", "k{1}"), "lay:idem:{acme%7Cx|k%7B1%7D}"; got != want {
		t.Fatalf("Key = %q, want %q", got, want)
	}
	fp := idempotency.NewFingerprint("POST", "/", nil, nil)
	ttls := idempotency.TTLs{Lease: 30 * time.Second, Record: time.Hour}
	o, err := s.Begin(ctx, "acme", "k", fp, ttls)
	if err != nil {
		t.Fatal(err)
	}
	k := s.Key("acme", "k")
	h := c.HGetAll(ctx, k).Val()
	if h["st"] != "p" || h["tok"] != o.Lease.Token || h["fp"] != fp.String() {
		t.Fatalf("in-progress hash = %v", h)
	}
	body := bytes.Repeat([]byte("compress me "), 1000)
	if err := s.Complete(ctx, o.Lease, idempotency.Response{Status: 200, Body: body}); err != nil {
		t.Fatal(err)
	}
	h = c.HGetAll(ctx, k).Val()
	if h["st"] != "c" || h["status"] != "200" || h["enc"] != "gzip" || len(h["body"]) >= len(body) {
		t.Fatalf("completed hash: st=%q status=%q enc=%q body %d bytes (raw %d)", h["st"], h["status"], h["enc"], len(h["body"]), len(body))
	}
	r, err := s.Begin(ctx, "acme", "k", fp, ttls)
	if err != nil || r.Kind != idempotency.Replay || !bytes.Equal(r.Response.Body, body) {
		t.Fatalf("replay: %v %v, %d bytes", r.Kind, err, len(r.Response.Body))
	}
	// A corrupt record is an error, never a panic or a bogus replay.
	c.HSet(ctx, k, "hdr", "\xff\xff\xff")
	if _, err := s.Begin(ctx, "acme", "k", fp, ttls); !errors.Is(err, redisstore.ErrUnexpectedReply) {
		t.Fatalf("Begin on a corrupt record = %v, want ErrUnexpectedReply", err)
	}
}

func TestNewRejects(t *testing.T) {
	if _, err := redisstore.New(nil, redisstore.Options{}); err == nil {
		t.Error("New(nil client) succeeded")
	}
	if _, err := redisstore.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), redisstore.Options{Prefix: "a{b"}); err == nil {
		t.Error("New with a brace in the prefix succeeded")
	}
}

// TestRedisDown: a store failure is an error (the caller then fails open or
// closed), never an outcome.
func TestRedisDown(t *testing.T) {
	srv := redistest.Standalone(t)
	c := srv.Client()
	s, err := redisstore.New(c, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = s.Begin(ctx, "t", "k", idempotency.NewFingerprint("POST", "/", nil, nil), storetest.TTLs)
	if err == nil || errors.Is(err, idempotency.ErrLeaseLost) {
		t.Fatalf("Begin with Redis down = %v, want a store error", err)
	}
}
