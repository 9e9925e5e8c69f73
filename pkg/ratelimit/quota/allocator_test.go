package quota

import (
	"context"
	"errors"
	"math"
	"reflect"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newMemory(t *testing.T) *MemoryStore {
	t.Helper()
	s, err := NewMemoryStore(MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newAllocator(t *testing.T, s DemandStore, c Config) *Allocator {
	t.Helper()
	a, err := NewAllocator(s, c)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func rates(shares map[string]Share) map[string]float64 {
	out := make(map[string]float64, len(shares))
	for id, s := range shares {
		out[id] = s.Rate
	}
	return out
}

// TestAllocatorSkewedLoad is issue 23's scenario: three Envoys offering
// 70 % / 20 % / 10 % of three times the limit. The small one is under its
// fair share and gets all it wants; the others split the rest. Two replicas
// over one store compute the same allocation.
func TestAllocatorSkewedLoad(t *testing.T) {
	t.Parallel()
	ctx, store := context.Background(), newMemory(t)
	a1, a2 := newAllocator(t, store, Config{}), newAllocator(t, store, Config{})
	for id, d := range map[string]float64{"big": 210, "mid": 60, "small": 30} {
		if err := a1.Report(ctx, "tenant-a", id, d, t0); err != nil {
			t.Fatal(err)
		}
	}
	got, err := a1.Allocate(ctx, "tenant-a", 100, t0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Share{
		"big":   {Demand: 210, Rate: 35, Bucket: TokenBucket{TokensPerFill: 2100, FillInterval: time.Minute, MaxTokens: 35}},
		"mid":   {Demand: 60, Rate: 35, Bucket: TokenBucket{TokensPerFill: 2100, FillInterval: time.Minute, MaxTokens: 35}},
		"small": {Demand: 30, Rate: 30, Bucket: TokenBucket{TokensPerFill: 1800, FillInterval: time.Minute, MaxTokens: 30}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Allocate = %+v\nwant %+v", got, want)
	}
	other, err := a2.Allocate(ctx, "tenant-a", 100, t0)
	if err != nil || !reflect.DeepEqual(other, got) {
		t.Fatalf("second replica: %+v (%v), want %+v", other, err, got)
	}
}

// TestAllocatorClientLeaves: a client that stops reporting drops out when
// its report is TTL old (two report intervals), and its share goes to the
// others; the others keep reporting every interval.
func TestAllocatorClientLeaves(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := newAllocator(t, newMemory(t), Config{Spare: SpareNone})
	report := func(at time.Duration, ids ...string) {
		for _, id := range ids {
			if err := a.Report(ctx, "k", id, 100, t0.Add(at)); err != nil {
				t.Fatal(err)
			}
		}
	}
	allocate := func(at time.Duration) map[string]float64 {
		s, err := a.Allocate(ctx, "k", 90, t0.Add(at))
		if err != nil {
			t.Fatal(err)
		}
		return rates(s)
	}
	report(0, "a", "b", "c")
	if got := allocate(0); !reflect.DeepEqual(got, map[string]float64{"a": 30, "b": 30, "c": 30}) {
		t.Fatalf("all three: %v", got)
	}
	// c's last report was at 0; a and b go on reporting every interval.
	report(ReportInterval, "a", "b")
	if got := allocate(ReportInterval); len(got) != 3 {
		t.Fatalf("one interval after c's last report: %v, want c still in", got)
	}
	report(2*ReportInterval, "a", "b")
	if got := allocate(2 * ReportInterval); !reflect.DeepEqual(got, map[string]float64{"a": 45, "b": 45}) {
		t.Fatalf("two intervals after c's last report: %v, want c's share split between a and b", got)
	}
}

func TestAllocatorSpareAndDeny(t *testing.T) {
	t.Parallel()
	demands := map[string]float64{"idle": 0, "busy": 2}
	got := Allocate(10, demands, Config{})
	if got["idle"].Rate != 4 || got["busy"].Rate != 6 || got["idle"].Bucket.DenyAll {
		t.Fatalf("SpareEqual: %+v, want idle 4 (a bucket), busy 6", got)
	}
	got = Allocate(10, demands, Config{Spare: SpareNone})
	if got["idle"].Rate != 0 || !got["idle"].Bucket.DenyAll || got["busy"].Rate != 2 {
		t.Fatalf("SpareNone: %+v, want idle denied, busy 2", got)
	}
	if got := Allocate(10, nil, Config{}); len(got) != 0 {
		t.Fatalf("no clients: %+v", got)
	}
	if got := Allocate(10, map[string]float64{"new": Unknown}, Config{}); got["new"].Rate != 10 || !math.IsInf(got["new"].Demand, 1) {
		t.Fatalf("unknown demand alone: %+v, want the whole budget", got)
	}
}

type failingStore struct{ DemandStore }

var errDown = errors.New("store down")

func (failingStore) Demands(context.Context, string, time.Time) (map[string]float64, error) {
	return nil, errDown
}

func (failingStore) GrowGrant(context.Context, Grant, float64, time.Time) (float64, error) {
	return 0, errDown
}

func TestAllocatorStoreError(t *testing.T) {
	t.Parallel()
	a := newAllocator(t, failingStore{}, Config{})
	if got, err := a.Allocate(context.Background(), "k", 10, t0); !errors.Is(err, errDown) || got != nil {
		t.Fatalf("Allocate = %v, %v; want nil, the store's error", got, err)
	}
}

func TestNewAllocatorRejects(t *testing.T) {
	t.Parallel()
	if _, err := NewAllocator(nil, Config{}); err == nil {
		t.Error("nil store accepted")
	}
	for _, c := range []Config{{Spare: Spare(7)}, {Bucket: BucketOptions{SlowInterval: time.Second}}, {Bucket: BucketOptions{Burst: time.Millisecond}}} {
		if _, err := NewAllocator(newMemory(t), c); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("NewAllocator(%+v): %v, want ErrInvalidOptions", c, err)
		}
	}
	if _, err := NewMemoryStore(MemoryOptions{TTL: -time.Second}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("NewMemoryStore with negative TTL: %v", err)
	}
}

func TestRateOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		requests int64
		period   time.Duration
		want     float64
	}{
		{100, time.Second, 100}, {30, time.Minute, 0.5}, {1, time.Hour, 1.0 / 3600},
		{5, 0, 0}, {5, -time.Second, 0}, {0, time.Second, 0}, {-1, time.Second, 0},
	}
	for _, tc := range tests {
		if got := RateOf(tc.requests, tc.period); got != tc.want {
			t.Errorf("RateOf(%d, %s) = %v, want %v", tc.requests, tc.period, got, tc.want)
		}
	}
}

// TestMemoryStoreSweeps: buckets nobody reads are dropped once their entries
// expire, at the first report a TTL after the last sweep.
func TestMemoryStoreSweeps(t *testing.T) {
	t.Parallel()
	s, ctx := newMemory(t), context.Background()
	for _, k := range []string{"a", "b", "c"} {
		if err := s.Report(ctx, k, "x", 1, t0); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.entries(); n != 3 {
		t.Fatalf("%d entries, want 3", n)
	}
	if err := s.Report(ctx, "d", "x", 1, t0.Add(DefaultTTL)); err != nil {
		t.Fatal(err)
	}
	if n := s.entries(); n != 1 {
		t.Fatalf("%d entries after a report a TTL later, want 1 (the expired ones swept)", n)
	}
}

// TestAllocatorStreamMoves: an Envoy whose stream moves to another replica
// starts a new Meter there, whose first demand is Unknown. The demand the
// old replica measured stands, so no share grows (no burst above the
// limit); the new replica's own measurement replaces it at the next report.
func TestAllocatorStreamMoves(t *testing.T) {
	t.Parallel()
	ctx, store := context.Background(), newMemory(t)
	replica1, replica2 := newAllocator(t, store, Config{}), newAllocator(t, store, Config{})
	observe := func(a *Allocator, m *Meter, id string, requests uint64, at time.Duration) {
		t.Helper()
		if err := a.Report(ctx, "k", id, m.Observe(requests, 0, t0.Add(at)), t0.Add(at)); err != nil {
			t.Fatal(err)
		}
	}
	var small, big, smallMoved Meter
	observe(replica1, &small, "small", 1, 0)
	observe(replica1, &big, "big", 1, 0)
	observe(replica1, &small, "small", 50, ReportInterval) // 10/s
	observe(replica1, &big, "big", 1000, ReportInterval)   // 200/s
	before, err := replica1.Allocate(ctx, "k", 100, t0.Add(ReportInterval))
	if err != nil {
		t.Fatal(err)
	}
	if before["small"].Rate != 10 || before["big"].Rate != 90 {
		t.Fatalf("before the move: %v", rates(before))
	}
	// small's stream moves: replica2's first report of it is Unknown.
	observe(replica2, &smallMoved, "small", 50, 2*ReportInterval)
	observe(replica1, &big, "big", 1000, 2*ReportInterval)
	after, err := replica2.Allocate(ctx, "k", 100, t0.Add(2*ReportInterval))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(after, before) {
		t.Fatalf("after the move: %+v, want unchanged %+v", after, before)
	}
}

// GrowGrant hands back the token bucket asked for when it fits, else the
// bucket of what the other clients' grants leave; SetGrant records a
// smaller share as it is, which makes room; errors name the bucket.
func TestAllocatorGrants(t *testing.T) {
	t.Parallel()
	ctx, a := context.Background(), newAllocator(t, newMemory(t), Config{})
	g := func(client string) Grant { return Grant{Bucket: "k", Client: client, TTL: time.Minute} }
	want := BucketFor(6, BucketOptions{})
	if got, err := a.GrowGrant(ctx, g("a"), want, 10, t0); err != nil || got != want {
		t.Fatalf("a alone: %+v, %v; want %+v", got, err, want)
	}
	if got, err := a.GrowGrant(ctx, g("b"), want, 10, t0); err != nil || got != BucketFor(4, BucketOptions{}) {
		t.Fatalf("b: %+v, %v; want the 4/s left", got, err)
	}
	if got, _ := a.GrowGrant(ctx, g("c"), want, 10, t0); !got.DenyAll {
		t.Fatalf("c with nothing left: %+v, want DenyAll", got)
	}
	shrunk := g("a")
	shrunk.Rate = 3
	if err := a.SetGrant(ctx, shrunk, t0); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.GrowGrant(ctx, g("c"), want, 10, t0); got != BucketFor(3, BucketOptions{}) {
		t.Fatalf("c after a shrank to 3: %+v, want 3/s", got)
	}
	a2 := newAllocator(t, failingStore{}, Config{})
	if _, err := a2.GrowGrant(ctx, g("a"), want, 10, t0); !errors.Is(err, errDown) {
		t.Errorf("GrowGrant on a failing store: %v, want its error", err)
	}
}
