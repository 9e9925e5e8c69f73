// Package quotatest is the behaviour every quota.DemandStore must show,
// written once and run against each implementation (memory, Redis
// standalone, Redis Cluster) from that store's tests.
package quotatest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit/quota"
)

// Harness adapts one DemandStore implementation to the suite.
type Harness struct {
	// New returns a store for one test whose entries live TTL and which
	// keeps time by the now its callers pass (a Redis store in its test
	// mode), so that the suite moves time without sleeping. Stores may be
	// shared between tests: the suite uses bucket keys unique to each.
	New func(t *testing.T) quota.DemandStore
	// TTL is the TTL of the stores New returns; at least 2ms.
	TTL time.Duration
}

// t0 is the suite's first instant; tests move forward from it.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// Run runs the whole suite.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		f    func(*testing.T, Harness)
	}{
		{"RoundTrip", testRoundTrip},
		{"ReportReplaces", testReplace},
		{"UnknownKeepsLiveKnownDemand", testUnknown},
		{"EntriesExpire", testExpiry},
		{"BucketIsolation", testIsolation},
		{"OddClientIDs", testOddClientIDs},
		{"BadDemandsStoredAsZero", testSanitise},
		{"EmptyKeysInvalid", testInvalid},
		{"EmptyBucket", testEmptyBucket},
		{"ConcurrentReports", testConcurrent},
		{"GrantsCapToRoom", testGrantsCapToRoom},
		{"GrantsExpire", testGrantsExpire},
		{"GrantsIsolated", testGrantsIsolated},
		{"GrantsInvalid", testGrantsInvalid},
		{"GrantsConcurrent", testGrantsConcurrent},
		{"GrantsTakeOverOrphans", testGrantsTakeOverOrphans},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.f(t, h)
		})
	}
}

// run tells this process's keys from those of earlier runs on one server.
var run = time.Now().UnixNano()

// Key returns a bucket key unique to the test and suffix: the same for the
// same arguments within one process.
func Key(t *testing.T, suffix string) string {
	return fmt.Sprintf("%s-%d|%s", t.Name(), run, suffix)
}

func report(t *testing.T, s quota.DemandStore, key, client string, d float64, now time.Time) {
	t.Helper()
	if err := s.Report(context.Background(), key, client, d, now); err != nil {
		t.Fatalf("Report(%q, %q, %v): %v", key, client, d, err)
	}
}

func demands(t *testing.T, s quota.DemandStore, key string, now time.Time) map[string]float64 {
	t.Helper()
	got, err := s.Demands(context.Background(), key, now)
	if err != nil {
		t.Fatalf("Demands(%q): %v", key, err)
	}
	if got == nil {
		t.Fatalf("Demands(%q) = nil map, want an empty one", key)
	}
	return got
}

// same compares bit for bit, so that replicas reading one store compute
// bit-identical allocations.
func same(t *testing.T, what string, got, want map[string]float64) {
	t.Helper()
	ok := len(got) == len(want)
	for id, w := range want {
		g, present := got[id]
		ok = ok && present && math.Float64bits(g) == math.Float64bits(w)
	}
	if !ok {
		t.Fatalf("%s: demands = %v, want %v", what, got, want)
	}
}

func testRoundTrip(t *testing.T, h Harness) {
	s, key := h.New(t), Key(t, "")
	want := map[string]float64{
		"zero": 0, "tiny": 5e-324, "tenth": 0.1, "third": 1.0 / 3, "mid": 12345.678,
		"huge": 1e300, "unknown": quota.Unknown,
	}
	for id, d := range want {
		report(t, s, key, id, d, t0)
	}
	same(t, "after reports", demands(t, s, key, t0), want)
}

func testReplace(t *testing.T, h Harness) {
	s, key := h.New(t), Key(t, "")
	report(t, s, key, "a", 5, t0)
	report(t, s, key, "a", 2.5, t0.Add(time.Millisecond))
	same(t, "after second report", demands(t, s, key, t0.Add(time.Millisecond)), map[string]float64{"a": 2.5})
}

func testUnknown(t *testing.T, h Harness) {
	s, key := h.New(t), Key(t, "")
	sec := time.Second
	report(t, s, key, "moved", 5, t0)
	report(t, s, key, "moved", quota.Unknown, t0.Add(sec))
	report(t, s, key, "new", quota.Unknown, t0)
	report(t, s, key, "new", quota.Unknown, t0.Add(sec))
	report(t, s, key, "stale", 7, t0.Add(-h.TTL))
	report(t, s, key, "stale", quota.Unknown, t0.Add(sec))
	report(t, s, key, "measured", quota.Unknown, t0)
	report(t, s, key, "measured", 3, t0.Add(sec))
	same(t, "after unknown reports", demands(t, s, key, t0.Add(sec)), map[string]float64{
		"moved": 5, "new": quota.Unknown, "stale": quota.Unknown, "measured": 3,
	})
	// The unknown report extended the known demand's life.
	same(t, "past the known report's TTL", demands(t, s, key, t0.Add(h.TTL)),
		map[string]float64{"moved": 5, "new": quota.Unknown, "stale": quota.Unknown, "measured": 3})
	same(t, "past the unknown report's TTL", demands(t, s, key, t0.Add(sec+h.TTL)), map[string]float64{})
}

func testExpiry(t *testing.T, h Harness) {
	s, key := h.New(t), Key(t, "")
	ttl, half := h.TTL, h.TTL/2
	report(t, s, key, "gone", 1, t0)
	report(t, s, key, "stays", 2, t0)
	report(t, s, key, "stays", 3, t0.Add(half))
	same(t, "just before TTL", demands(t, s, key, t0.Add(ttl-time.Millisecond)), map[string]float64{"gone": 1, "stays": 3})
	same(t, "at TTL", demands(t, s, key, t0.Add(ttl)), map[string]float64{"stays": 3})
	// An expired entry does not come back when the bucket is written again.
	report(t, s, key, "new", 4, t0.Add(ttl))
	same(t, "after a new report", demands(t, s, key, t0.Add(ttl)), map[string]float64{"stays": 3, "new": 4})
	same(t, "at the refreshed TTL", demands(t, s, key, t0.Add(half+ttl)), map[string]float64{"new": 4})
	same(t, "all expired", demands(t, s, key, t0.Add(2*ttl)), map[string]float64{})
}

func testIsolation(t *testing.T, h Harness) {
	s := h.New(t)
	suffixes := []string{"a", "a}", "{a}", "a:b", "a b", "%7B", "#x", "é\x00\xff", strings.Repeat("k", 2000)}
	for i, sfx := range suffixes {
		report(t, s, Key(t, sfx), "client", float64(i), t0)
	}
	for i, sfx := range suffixes {
		same(t, fmt.Sprintf("bucket %q", sfx), demands(t, s, Key(t, sfx), t0), map[string]float64{"client": float64(i)})
	}
}

func testOddClientIDs(t *testing.T, h Harness) {
	s, key := h.New(t), Key(t, "")
	want := map[string]float64{}
	for i, id := range []string{" ", "a b", "{x}", "x y 1", "\x00\xff\n", "é", strings.Repeat("c", 1000)} {
		want[id] = float64(i + 1)
		report(t, s, key, id, float64(i+1), t0)
	}
	same(t, "odd client IDs", demands(t, s, key, t0), want)
}

func testSanitise(t *testing.T, h Harness) {
	s, key := h.New(t), Key(t, "")
	report(t, s, key, "nan", math.NaN(), t0)
	report(t, s, key, "negative", -1, t0)
	report(t, s, key, "minus-inf", math.Inf(-1), t0)
	same(t, "bad demands", demands(t, s, key, t0), map[string]float64{"nan": 0, "negative": 0, "minus-inf": 0})
}

func testInvalid(t *testing.T, h Harness) {
	s, ctx := h.New(t), context.Background()
	if err := s.Report(ctx, "", "c", 1, t0); !errors.Is(err, quota.ErrInvalid) {
		t.Errorf("Report with empty bucket key: %v, want ErrInvalid", err)
	}
	if err := s.Report(ctx, Key(t, ""), "", 1, t0); !errors.Is(err, quota.ErrInvalid) {
		t.Errorf("Report with empty client ID: %v, want ErrInvalid", err)
	}
	if _, err := s.Demands(ctx, "", t0); !errors.Is(err, quota.ErrInvalid) {
		t.Errorf("Demands with empty bucket key: %v, want ErrInvalid", err)
	}
}

func testEmptyBucket(t *testing.T, h Harness) {
	same(t, "never reported", demands(t, h.New(t), Key(t, ""), t0), map[string]float64{})
}

func testConcurrent(t *testing.T, h Harness) {
	s, key := h.New(t), Key(t, "")
	const writers, each = 16, 20
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				id := fmt.Sprintf("w%d-c%d", w, i)
				if err := s.Report(context.Background(), key, id, float64(w*each+i), t0); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	want := map[string]float64{}
	for w := range writers {
		for i := range each {
			want[fmt.Sprintf("w%d-c%d", w, i)] = float64(w*each + i)
		}
	}
	same(t, "after concurrent reports", demands(t, s, key, t0), want)
}
