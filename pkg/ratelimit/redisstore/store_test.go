package redisstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// TestExactlyRequestsAdmittedOnRedisClock runs each algorithm on Redis's own
// clock (no fixed instant): R hits in a burst pass, the next is denied with a
// RetryAfter and ResetAfter inside the bounds the algorithm promises.
func TestExactlyRequestsAdmittedOnRedisClock(t *testing.T) {
	t.Parallel()
	_, c := standalone(t)
	const r = 10
	const period = time.Minute
	cases := []struct {
		alg ratelimit.Algorithm
		// bounds on the denied call's RetryAfter
		minRetry, maxRetry time.Duration
	}{
		// GCRA: the (R+1)-th waits one emission interval, less the time
		// the burst itself took.
		{ratelimit.GCRA, period/r - time.Second, period / r},
		// sliding_log: until the oldest admitted hit ages out.
		{ratelimit.SlidingLog, period - time.Second, period},
		// fixed and sliding windows: at most one (two for sliding) periods.
		{ratelimit.FixedWindow, time.Microsecond, period},
		{ratelimit.SlidingWindow, time.Microsecond, 2 * period},
	}
	for _, tc := range cases {
		t.Run(string(tc.alg), func(t *testing.T) {
			t.Parallel()
			s := newStore(t, c)
			key := randomKey(t)
			l := limitFor(tc.alg, r, period)
			admitted := 0
			var last ratelimit.Result
			for i := 0; i < 2*r; i++ {
				res, err := s.Allow(context.Background(), key, l, 1)
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				if res.Allowed {
					admitted++
					if res.RetryAfter != 0 {
						t.Errorf("allowed with RetryAfter %v", res.RetryAfter)
					}
				} else if last.Allowed || i == 0 {
					checkDenied(t, res, tc.minRetry, tc.maxRetry, period)
				}
				last = res
			}
			// A window boundary may fall inside the burst for the window
			// algorithms; with a one-minute period that is rare but possible.
			if admitted != r && (tc.alg != ratelimit.FixedWindow || admitted > 2*r) {
				t.Fatalf("admitted %d of %d, want exactly %d", admitted, 2*r, r)
			}
		})
	}
	assertAllKeysHaveTTL(t, c)
}

func checkDenied(t *testing.T, res ratelimit.Result, minRetry, maxRetry, period time.Duration) {
	t.Helper()
	if res.RetryAfter < minRetry || res.RetryAfter > maxRetry {
		t.Errorf("RetryAfter %v outside [%v, %v]", res.RetryAfter, minRetry, maxRetry)
	}
	if res.ResetAfter <= 0 || res.ResetAfter > 2*period {
		t.Errorf("ResetAfter %v outside (0, %v]", res.ResetAfter, 2*period)
	}
	if res.Remaining != 0 {
		t.Errorf("Remaining %d after the burst, want 0", res.Remaining)
	}
}

// TestFixedInstantTables checks the algorithms' defining cases at fixed
// instants, the same cases as package ratelimit's tables.
func TestFixedInstantTables(t *testing.T) {
	t.Parallel()
	_, c := standalone(t)
	s, clk := fixedStore(t, c)
	ctx := context.Background()
	type step struct {
		at   time.Duration
		hits int64
		want ratelimit.Result
	}
	ok := func(limit, rem int64, reset time.Duration) ratelimit.Result {
		return ratelimit.Result{Allowed: true, Limit: limit, Remaining: rem, ResetAfter: reset}
	}
	deny := func(limit, rem int64, reset, retry time.Duration) ratelimit.Result {
		return ratelimit.Result{Limit: limit, Remaining: rem, ResetAfter: reset, RetryAfter: retry}
	}
	cases := []struct {
		name  string
		limit ratelimit.Limit
		steps []step
	}{
		{"gcra burst then one per interval", ratelimit.Limit{Requests: 2, Period: time.Second}, []step{
			{0, 1, ok(2, 1, 500*time.Millisecond)},
			{0, 1, ok(2, 0, time.Second)},
			{0, 1, deny(2, 0, time.Second, 500*time.Millisecond)},
			{500 * time.Millisecond, 1, ok(2, 0, time.Second)},
			{500 * time.Millisecond, 0, ok(2, 0, time.Second)}, // a check at a full bucket passes
		}},
		{"fixed window resets at the edge", limitFor(ratelimit.FixedWindow, 2, time.Second), []step{
			{900 * time.Millisecond, 2, ok(2, 0, 100*time.Millisecond)},
			{950 * time.Millisecond, 1, deny(2, 0, 50*time.Millisecond, 50*time.Millisecond)},
			{time.Second, 2, ok(2, 0, time.Second)},
		}},
		{"sliding log frees the oldest", limitFor(ratelimit.SlidingLog, 2, time.Second), []step{
			{0, 1, ok(2, 1, time.Second)},
			{300 * time.Millisecond, 1, ok(2, 0, time.Second)},
			{400 * time.Millisecond, 1, deny(2, 0, 900*time.Millisecond, 600*time.Millisecond)},
			{time.Second, 1, ok(2, 0, time.Second)},
		}},
		{"sliding window weights the previous window", limitFor(ratelimit.SlidingWindow, 10, time.Second), []step{
			{0, 10, ok(10, 0, 2*time.Second)},
			{1500 * time.Millisecond, 5, ok(10, 0, 1500*time.Millisecond)},
			{1500 * time.Millisecond, 1, deny(10, 0, 1500*time.Millisecond, 100*time.Millisecond)},
		}},
	}
	for _, tc := range cases {
		key := randomKey(t) + tc.name
		for i, st := range tc.steps {
			clk.now = t0 + st.at.Microseconds()
			got, err := s.Allow(ctx, key, tc.limit, st.hits)
			if err != nil {
				t.Fatalf("%s step %d: %v", tc.name, i, err)
			}
			if got != st.want {
				t.Errorf("%s step %d:\n got %+v\nwant %+v", tc.name, i, got, st.want)
			}
		}
	}
}

// TestAllOrNoneChargesNothingOnDenial: a request denied by one of its limits
// leaves the others as they were.
func TestAllOrNoneChargesNothingOnDenial(t *testing.T) {
	t.Parallel()
	_, c := standalone(t)
	s := newStore(t, c)
	ctx := context.Background()
	key := randomKey(t)
	perSecond := limitFor(ratelimit.FixedWindow, 100, time.Hour)
	tight := limitFor(ratelimit.SlidingLog, 1, time.Hour)
	req := ratelimit.Request{Key: key, Limits: []ratelimit.Limit{perSecond, tight}, Hits: 1}
	for i, wantAllowed := range []bool{true, false, false} {
		d, err := s.AllowBatch(ctx, []ratelimit.Request{req})
		if err != nil {
			t.Fatal(err)
		}
		if d[0].Allowed != wantAllowed {
			t.Fatalf("call %d: allowed %v, want %v", i, d[0].Allowed, wantAllowed)
		}
	}
	res, err := s.Allow(ctx, key, perSecond, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.Remaining != 99 {
		t.Fatalf("hourly limit remaining %d after 1 admitted and 2 denied requests, want 99", res.Remaining)
	}
}

// TestWindowStateUsesSharedFieldNames reads a window hash back through the Go
// constants the Lua depends on.
func TestWindowStateUsesSharedFieldNames(t *testing.T) {
	t.Parallel()
	_, c := standalone(t)
	s, clk := fixedStore(t, c)
	ctx := context.Background()
	key := randomKey(t)
	l := limitFor(ratelimit.SlidingWindow, 10, time.Second)
	clk.now = t0 - 1
	if _, err := s.Allow(ctx, key, l, 2); err != nil {
		t.Fatal(err)
	}
	clk.now = t0
	if _, err := s.Allow(ctx, key, l, 3); err != nil {
		t.Fatal(err)
	}
	got, err := c.HGetAll(ctx, stateKey(DefaultPrefix, tagIdentity(key), l)).Result()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{fieldWindow: strconv.FormatInt(t0/1e6, 10), fieldCount: "3", fieldPrev: "2"}
	if len(got) != len(want) {
		t.Fatalf("hash %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("hash %v, want %v", got, want)
		}
	}
}

// TestBatchRecoversFromEmptyScriptCache: after SCRIPT FLUSH (what a restart
// or failover does) a pipelined batch still succeeds via EVAL.
func TestBatchRecoversFromEmptyScriptCache(t *testing.T) {
	t.Parallel()
	_, c := standalone(t)
	s := newStore(t, c)
	ctx := context.Background()
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	l := limitFor(ratelimit.GCRA, 5, time.Minute)
	reqs := []ratelimit.Request{
		{Key: randomKey(t), Limits: []ratelimit.Limit{l}, Hits: 1},
		{Key: randomKey(t), Limits: []ratelimit.Limit{l}, Hits: 1},
	}
	d, err := s.AllowBatch(ctx, reqs)
	if err != nil {
		t.Fatalf("AllowBatch after SCRIPT FLUSH: %v", err)
	}
	if !d[0].Allowed || !d[1].Allowed {
		t.Fatalf("decisions %+v, want both allowed", d)
	}
}

func TestRejectsBadRequests(t *testing.T) {
	t.Parallel()
	_, c := standalone(t)
	s := newStore(t, c)
	ctx := context.Background()
	good := limitFor(ratelimit.GCRA, 1, time.Second)
	cases := []struct {
		name string
		req  ratelimit.Request
		want error
	}{
		{"no limits", ratelimit.Request{Key: "k", Hits: 1}, ratelimit.ErrInvalidLimit},
		{"negative hits", ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{good}, Hits: -1}, ratelimit.ErrInvalidHits},
		{"invalid limit", ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{{Requests: 0, Period: time.Second}}}, ratelimit.ErrInvalidLimit},
		{"same algorithm and period twice", ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{good, good}}, ratelimit.ErrInvalidLimit},
		{"beyond exact range", ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{{Requests: 1, Period: 1 << 62, Burst: 1}}}, ratelimit.ErrInvalidLimit},
	}
	for _, tc := range cases {
		if _, err := s.AllowBatch(ctx, []ratelimit.Request{tc.req}); !errors.Is(err, tc.want) {
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	t.Parallel()
	if _, err := New(nil, Options{}); err == nil {
		t.Error("New(nil client) succeeded")
	}
	_, c := standalone(t)
	if _, err := New(c, Options{Prefix: "a{b"}); err == nil || !strings.Contains(err.Error(), "prefix") {
		t.Errorf("New with a brace in the prefix: %v, want a prefix error", err)
	}
}

func TestClosedStore(t *testing.T) {
	t.Parallel()
	_, c := standalone(t)
	s := newStore(t, c)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	_, err := s.Allow(context.Background(), "k", limitFor(ratelimit.GCRA, 1, time.Second), 1)
	if !errors.Is(err, ratelimit.ErrClosed) {
		t.Fatalf("Allow after Close: %v, want ErrClosed", err)
	}
}

func TestParseReplyChecksTypes(t *testing.T) {
	t.Parallel()
	bad := []any{
		"OK",
		[]any{int64(1)},
		[]any{int64(1), int64(1), int64(1), int64(0), "x", int64(0)},
		[]any{int64(1), int64(1), int64(1), int64(0), int64(0)},
	}
	for _, v := range bad {
		if _, err := parseReply(v, make([]ratelimit.Result, 1)); !errors.Is(err, ErrUnexpectedReply) {
			t.Errorf("parseReply(%#v) error %v, want ErrUnexpectedReply", v, err)
		}
	}
	d, err := parseReply([]any{int64(0), int64(0), int64(7), int64(2), int64(1000), int64(5)}, make([]ratelimit.Result, 1))
	if err != nil {
		t.Fatal(err)
	}
	want := ratelimit.Result{Limit: 7, Remaining: 2, ResetAfter: time.Millisecond, RetryAfter: 5 * time.Microsecond}
	if d.Allowed || d.Results[0] != want {
		t.Fatalf("parseReply = %+v, want denied %+v", d, want)
	}
}
