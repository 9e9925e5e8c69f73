package quotaredis

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/ratelimit/quota"
	"github.com/extauthz/extauthz/pkg/ratelimit/quota/quotatest"
)

const testTTL = 10 * time.Second

// testStore is a Store on the callers' clock, as the suite needs.
func testStore(t *testing.T, c redis.UniversalClient) quota.DemandStore {
	t.Helper()
	s, err := New(c, Options{Prefix: "t", TTL: testTTL})
	if err != nil {
		t.Fatal(err)
	}
	s.callerClock = true
	return s
}

func TestConformanceStandalone(t *testing.T) {
	t.Parallel()
	c := redistest.Standalone(t).Client()
	quotatest.Run(t, quotatest.Harness{New: func(t *testing.T) quota.DemandStore { return testStore(t, c) }, TTL: testTTL})
}

func TestConformanceCluster(t *testing.T) {
	t.Parallel()
	c := redistest.NewCluster(t).Client()
	quotatest.Run(t, quotatest.Harness{New: func(t *testing.T) quota.DemandStore { return testStore(t, c) }, TTL: testTTL})
}

// TestRedisClock: without the test hook the scripts read Redis's TIME, not
// the callers' now (which here is a year off): a field whose expiry is past
// by Redis's clock is dropped and deleted, a fresh report is live, and the
// key carries the TTL.
func TestRedisClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := redistest.Standalone(t).Client()
	s, err := New(c, Options{TTL: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	key := "tenant|domain|path=/a{b}"
	wrongNow := time.Now().AddDate(1, 0, 0)
	if err := s.Report(ctx, key, "live", 2.5, wrongNow); err != nil {
		t.Fatal(err)
	}
	past := strconv.FormatInt(time.Now().Add(-time.Hour).UnixMilli(), 10)
	if err := c.HSet(ctx, s.Key(key), "stale", past+" 7", "garbled", "x").Err(); err != nil {
		t.Fatal(err)
	}
	got, err := s.Demands(ctx, key, wrongNow)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got["live"] != 2.5 {
		t.Fatalf("Demands = %v, want only live: 2.5", got)
	}
	fields, err := c.HKeys(ctx, s.Key(key)).Result()
	if err != nil || len(fields) != 1 || fields[0] != "live" {
		t.Fatalf("fields left = %v (%v), want [live]: expired ones are deleted", fields, err)
	}
	pttl, err := c.PTTL(ctx, s.Key(key)).Result()
	if err != nil || pttl <= 0 || pttl > 4*time.Second {
		t.Fatalf("key TTL = %s (%v), want (0, 4s]", pttl, err)
	}
	if want := "xa:q:{tenant|domain|path=/a%7Bb%7D}"; s.Key(key) != want {
		t.Fatalf("Key = %q, want %q", s.Key(key), want)
	}
}

// TestKeyTTLOnlyExtended: a report never shortens the key's TTL below that
// of a newer field (a replica configured with a shorter TTL).
func TestKeyTTLOnlyExtended(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := redistest.Standalone(t).Client()
	long, _ := New(c, Options{TTL: time.Hour})
	short, _ := New(c, Options{TTL: time.Second})
	if err := long.Report(ctx, "k", "a", 1, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := short.Report(ctx, "k", "b", 1, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if pttl := c.PTTL(ctx, long.Key("k")).Val(); pttl < time.Hour-time.Minute {
		t.Fatalf("key TTL = %s after a shorter report, want about 1h", pttl)
	}
}

func TestNewRejects(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = c.Close() })
	if _, err := New(nil, Options{}); err == nil {
		t.Error("nil client accepted")
	}
	for _, o := range []Options{{Prefix: "a{b"}, {Prefix: "}"}, {TTL: time.Microsecond}, {TTL: -time.Second}} {
		if _, err := New(c, o); !errors.Is(err, quota.ErrInvalidOptions) {
			t.Errorf("New(%+v): %v, want ErrInvalidOptions", o, err)
		}
	}
}

// TestRedisDown: a store failure is an error, not an empty allocation.
func TestRedisDown(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	s, err := New(srv.Client(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	ctx := context.Background()
	if err := s.Report(ctx, "k", "c", 1, time.Time{}); err == nil {
		t.Error("Report with Redis down: nil error")
	}
	if _, err := s.Demands(ctx, "k", time.Time{}); err == nil {
		t.Error("Demands with Redis down: nil error")
	}
}

func TestUnknownArg(t *testing.T) {
	t.Parallel()
	if got := strconv.FormatFloat(quota.Unknown, 'g', -1, 64); got != unknownArg {
		t.Fatalf("quota.Unknown formats as %q, report.lua expects %q", got, unknownArg)
	}
}

func TestParseDemandsRejects(t *testing.T) {
	t.Parallel()
	for _, v := range []any{"x", []any{"a"}, []any{int64(1), "2"}, []any{"a", int64(2)}, []any{"a", "two"}} {
		if _, err := parseDemands(v); !errors.Is(err, ErrUnexpectedReply) {
			t.Errorf("parseDemands(%#v): %v, want ErrUnexpectedReply", v, err)
		}
	}
}

// TestReplicasAgree: two replicas, each with its own client and store on
// Redis's clock, report their Envoys' demands and compute bit-identical
// allocations.
func TestReplicasAgree(t *testing.T) {
	t.Parallel()
	ctx, srv := context.Background(), redistest.Standalone(t)
	var allocs [2]*quota.Allocator
	for i := range allocs {
		s, err := New(srv.Client(), Options{})
		if err != nil {
			t.Fatal(err)
		}
		if allocs[i], err = quota.NewAllocator(s, quota.Config{}); err != nil {
			t.Fatal(err)
		}
	}
	demands := map[string]float64{"envoy-1": 210.25, "envoy-2": 1.0 / 3, "envoy-3": 60, "envoy-4": quota.Unknown}
	i := 0
	for id, d := range demands {
		if err := allocs[i%2].Report(ctx, "tenant-a|api", id, d, time.Now()); err != nil {
			t.Fatal(err)
		}
		i++
	}
	a, err := allocs[0].Allocate(ctx, "tenant-a|api", 100, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	b, err := allocs[1].Allocate(ctx, "tenant-a|api", 100, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != len(demands) || !reflect.DeepEqual(a, b) {
		t.Fatalf("replica 1: %+v\nreplica 2: %+v", a, b)
	}
	if want := quota.Allocate(100, demands, quota.Config{}); !reflect.DeepEqual(a, want) {
		t.Fatalf("from Redis: %+v\nin memory: %+v", a, want)
	}
}
