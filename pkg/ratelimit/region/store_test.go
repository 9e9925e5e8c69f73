package region

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/redisscript"
	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/internal/testclock"
)

// Regions' Redis clocks apart by ±80 ms: each region counts admissions in
// its own clock's windows, and the sum per window index never exceeds the
// limit (grants are per window index; no clock is trusted for the bound).
func TestSimClockSkew(t *testing.T) {
	s := newSim(t, simRule, simInterval, simLease, "ap", "eu", "us")
	s.setSkew(s.region("eu"), 80*time.Millisecond)
	s.setSkew(s.region("us"), -80*time.Millisecond)
	s.region("ap").rate, s.region("eu").rate, s.region("us").rate = 300, 900, 600
	start := s.window()
	s.run(3 * time.Second)
	s.region("ap").rate, s.region("eu").rate = 900, 300
	s.run(3 * time.Second)
	s.checkNeverOver(start-1, s.window()+1)
	t.Logf("per window %v", s.totals(start, s.window()))
}

func newTestPair(t *testing.T, c redisscript.Processor, clock *testclock.Clock, region string) (*Local, *Global) {
	t.Helper()
	l, err := NewLocal(c, "t"+region)
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGlobal(c, "t")
	if err != nil {
		t.Fatal(err)
	}
	l.now, g.now = clock.Now, clock.Now
	return l, g
}

var testTopo = Topology{Region: "eu", Regions: []string{"eu", "us"}, Interval: 100 * time.Millisecond, Lease: 300 * time.Millisecond}

// Two replicas of one region: one exchanges a key at a time; when its lease
// lapses the other takes over, and the first can no longer write the caps.
func TestOneExchangerPerKeyAndRegion(t *testing.T) {
	ctx := context.Background()
	clock := testclock.New(time.UnixMilli(1_800_000_000_000))
	c := redistest.Standalone(t).Client()
	l, g := newTestPair(t, c, clock, "eu")
	r1, err := NewExchanger(testTopo, l, g, "replica-1")
	if err != nil {
		t.Fatal(err)
	}
	r2, _ := NewExchanger(testTopo, l, g, "replica-2")
	if out, err := r1.Step(ctx, "k", simRule); err != nil || !out.Owner {
		t.Fatalf("first replica: %+v, %v; want it to exchange", out, err)
	}
	if out, err := r2.Step(ctx, "k", simRule); err != nil || out.Owner {
		t.Fatalf("second replica while the first holds the lease: %+v, %v; want a no-op", out, err)
	}
	clock.Advance(3*testTopo.Interval + time.Millisecond)
	if out, err := r2.Step(ctx, "k", simRule); err != nil || !out.Owner {
		t.Fatalf("second replica after the lease lapsed: %+v, %v; want it to exchange", out, err)
	}
	// A replica that neither holds the lease nor decides the key drops it.
	for range idleSteps + 1 {
		_, _ = r2.Step(ctx, "k", simRule) // r2 keeps the lease
		if _, err := r1.Step(ctx, "k", simRule); err != nil {
			t.Fatal(err)
		}
		r1.snapshot()
	}
	if _, kept := r1.snapshot()["k"]; kept {
		t.Error("a replica that is not the exchanger and no longer decides the key still tracks it")
	}
	_, _, err = l.setCaps(ctx, "k", "replica-1", "mirror", simRule, testTopo, simRule.Window(clock.Now()), 1000, 1000)
	if !errors.Is(err, ErrNotOwner) {
		t.Fatalf("stale replica's cap write: %v, want ErrNotOwner", err)
	}
}

// A shrink carries the generation it read: one that lost a race with any
// later grant call (a replica whose lease lapsed mid-step, while the new
// holder's grant changed nothing and it is about to mirror that grant into
// the local caps) changes nothing.
func TestStaleShrinkIsIgnored(t *testing.T) {
	ctx := context.Background()
	clock := testclock.New(time.UnixMilli(1_800_000_000_000))
	_, g := newTestPair(t, redistest.Standalone(t).Client(), clock, "eu")
	w := simRule.Window(clock.Now())
	first, err := g.Grant(ctx, "k", simRule, testTopo, Ask{Window: w, Want: 400, WantNext: 400})
	if err != nil || first.Budget != 400 {
		t.Fatalf("grow: %+v, %v", first, err)
	}
	// The new holder's grant asks for what is already granted: no change.
	same, _ := g.Grant(ctx, "k", simRule, testTopo, Ask{Window: w, Want: 400, WantNext: 400, Gen: first.Gen})
	stale, err := g.Grant(ctx, "k", simRule, testTopo, Ask{Window: w, Want: 100, WantNext: 100, Gen: first.Gen})
	if err != nil || stale.Budget != 400 {
		t.Fatalf("stale shrink after an unchanged grant: %+v, %v; want the grant kept at 400", stale, err)
	}
	fresh, _ := g.Grant(ctx, "k", simRule, testTopo, Ask{Window: w, Want: 100, WantNext: 100, Gen: stale.Gen})
	if fresh.Budget != 100 || same.Budget != 400 {
		t.Fatalf("current shrink: %+v, want 100", fresh)
	}
}

// A grow takes only the room the others' grants and floors leave, and the
// next window is granted only within the lease of its start.
func TestGrowIntoRoomOnly(t *testing.T) {
	ctx := context.Background()
	clock := testclock.New(time.UnixMilli(1_800_000_000_000)) // a window start
	c := redistest.Standalone(t).Client()
	_, g := newTestPair(t, c, clock, "eu")
	us := testTopo
	us.Region = "us"
	w := simRule.Window(clock.Now())
	eu, _ := g.Grant(ctx, "k", simRule, testTopo, Ask{Window: w, Want: 980, WantNext: 980})
	if eu.Budget != 950 || eu.Next != 0 {
		t.Fatalf("eu alone: %+v, want 950 (the limit less us's floor) and nothing for the next window yet", eu)
	}
	got, _ := g.Grant(ctx, "k", simRule, us, Ask{Window: w, Want: 500, WantNext: 500})
	if got.Budget != 50 {
		t.Fatalf("us: %+v, want 50 (what eu leaves)", got)
	}
	clock.Advance(simRule.Period - testTopo.Lease)
	eu, _ = g.Grant(ctx, "k", simRule, testTopo, Ask{Window: w, Want: 600, WantNext: 600, Gen: eu.Gen})
	if eu.Budget != 600 || eu.Next != 600 {
		t.Fatalf("eu within the lease of the next window: %+v, want 600 and 600", eu)
	}
}

// A call that lands a window after the one its asks were made in (a step
// whose claim came just before a window ended, its script just after)
// grants its new next window too, growing it to what the asked next wanted,
// room-checked, and never shrinking it. Without that, a region whose steps
// all crossed the boundary at the same phase (one step a window, long
// round trips) started every window on its floor: 181 of its 210 a window
// at 3:1 end to end.
func TestStepAcrossWindowBoundaryGrantsItsNewNext(t *testing.T) {
	ctx := context.Background()
	clock := testclock.New(time.UnixMilli(1_800_000_000_000 - 100)) // 100 ms before a window
	c := redistest.Standalone(t).Client()
	_, g := newTestPair(t, c, clock, "eu")
	// One step a window: a lease longer than the window, so the next one is
	// always grantable.
	eu := Topology{Region: "eu", Regions: []string{"eu", "us"}, Interval: time.Second, Lease: 2500 * time.Millisecond}
	us := eu
	us.Region = "us"
	asked := simRule.Window(clock.Now())
	clock.Advance(200 * time.Millisecond) // the script runs in the next window
	got, err := g.Grant(ctx, "k", simRule, eu, Ask{Window: asked, Want: 700, WantNext: 700})
	if err != nil || got.Window != asked+1 || got.Budget != 700 || got.Next != 700 {
		t.Fatalf("eu's step across the boundary: %+v, %v; want 700 for the window it landed in and 700 for the one after", got, err)
	}
	// Room-checked: us asks 500 a window the same way; eu holds 700.
	other, _ := g.Grant(ctx, "k", simRule, us, Ask{Window: asked, Want: 500, WantNext: 500})
	if other.Budget != 300 || other.Next != 300 {
		t.Fatalf("us across the boundary: %+v, want 300 and 300 (what eu leaves)", other)
	}
	// Never a shrink: a lower value for the window after next keeps eu's.
	got, _ = g.Grant(ctx, "k", simRule, eu, Ask{Window: asked, Want: 700, WantNext: 100, Gen: got.Gen})
	if got.Next != 700 {
		t.Fatalf("eu's grant for the window after the asked next: %d, want 700 kept (it may only grow)", got.Next)
	}
}

// The scripts run unchanged on Redis Cluster: each touches one key.
func TestExchangeOnCluster(t *testing.T) {
	ctx := context.Background()
	clock := testclock.New(time.UnixMilli(1_800_000_000_000))
	c := redistest.NewCluster(t).Client()
	l, g := newTestPair(t, c, clock, "eu")
	ex, _ := NewExchanger(testTopo, l, g, "replica-1")
	k := "tenant-{a}|x}{"
	for range 5 {
		if _, err := ex.Decide(ctx, k, simRule, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := ex.Step(ctx, k, simRule); err != nil {
			t.Fatal(err)
		}
		clock.Advance(testTopo.Interval)
	}
	res, err := ex.Decide(ctx, k, simRule, 1)
	if err != nil || !res.Allowed || res.Cap != simRule.Limit-simRule.FloorHits() {
		t.Fatalf("decide on cluster: %+v, %v; want allowed with cap %d", res, err, simRule.Limit-simRule.FloorHits())
	}
	if n := strings.Count(g.Key(k), "{"); n != 1 {
		t.Errorf("global key %q has %d '{', want the key's braces escaped", g.Key(k), n)
	}
}

func TestValidate(t *testing.T) {
	bad := []struct {
		name string
		err  error
	}{
		{"limit", Rule{Limit: 0, Period: time.Second}.Validate(2)},
		{"period", Rule{Limit: 1, Period: 1500 * time.Microsecond}.Validate(2)},
		{"floor", Rule{Limit: 1, Period: time.Second, Floor: -0.1}.Validate(2)},
		{"floors above the limit", Rule{Limit: 1, Period: time.Second, Floor: 0.4}.Validate(3)},
		{"region not listed", Topology{Region: "ap", Regions: []string{"eu"}, Interval: time.Second, Lease: time.Second}.Validate()},
		{"comma", Topology{Region: "eu", Regions: []string{"eu", "a,b"}, Interval: time.Second, Lease: time.Second}.Validate()},
		{"duplicate", Topology{Region: "eu", Regions: []string{"eu", "eu"}, Interval: time.Second, Lease: time.Second}.Validate()},
		{"lease", Topology{Region: "eu", Regions: []string{"eu"}, Interval: time.Second, Lease: time.Millisecond}.Validate()},
	}
	for _, b := range bad {
		if !errors.Is(b.err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", b.name, b.err)
		}
	}
	if err := (Rule{Limit: 6000, Period: time.Minute, Floor: 0.05}).Validate(3); err != nil {
		t.Errorf("a good rule: %v", err)
	}
}
