package redisstore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/redisclient"
	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// chargeStep is one request of a charge scenario and the Decision's
// Allowed and first Remaining it must give.
type chargeStep struct {
	mode    ratelimit.ChargeMode
	hits    int64
	allowed bool
	left    int64
}

// budgetScenario: a budget of 1000 charged 300 after each request on every
// algorithm (gcra with burst 1000): four checks admit, the fourth charge
// takes the count over, the next check is refused, and refunds bring it
// back, never below empty.
var budgetScenario = []chargeStep{
	{ratelimit.ChargeNever, 1, true, 999},
	{ratelimit.ChargeAlways, 300, true, 700},
	{ratelimit.ChargeAlways, 300, true, 400},
	{ratelimit.ChargeAlways, 300, true, 100},
	{ratelimit.ChargeNever, 1, true, 99},
	{ratelimit.ChargeAlways, 300, false, 0},
	{ratelimit.ChargeNever, 1, false, 0},
	{ratelimit.ChargeIfAdmitted, 1, false, 0},
	{ratelimit.ChargeAlways, -250, true, 50},
	{ratelimit.ChargeAlways, -5000, true, 1000},
}

func playBudget(t *testing.T, s *Store, key string) {
	t.Helper()
	for _, alg := range ratelimit.Algorithms() {
		l := limitFor(alg, 1000, time.Hour)
		for i, st := range budgetScenario {
			d, err := s.AllowBatch(context.Background(), []ratelimit.Request{{Key: key, Limits: []ratelimit.Limit{l}, Hits: st.hits, Charge: st.mode}})
			if err != nil {
				t.Fatalf("%s step %d: %v", alg, i, err)
			}
			if alg == ratelimit.SlidingLog && st.hits == -250 {
				st.left = 250 // its log kept the newest 1000 hits, not 1200
			}
			if d[0].Allowed != st.allowed || d[0].Results[0].Remaining != st.left {
				t.Errorf("%s step %d (%s %d): allowed %v, remaining %d; want %v, %d",
					alg, i, st.mode, st.hits, d[0].Allowed, d[0].Results[0].Remaining, st.allowed, st.left)
			}
		}
	}
}

func TestChargeModesStandalone(t *testing.T) {
	t.Parallel()
	srv, c := standalone(t)
	s, _ := fixedStore(t, c)
	playBudget(t, s, randomKey(t))
	assertAllKeysHaveTTL(t, srv.Client())
}

func TestChargeModesCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.NewCluster(t)
	s, _ := fixedStore(t, cl.Client())
	for range 3 { // keys of several slots, hence nodes
		playBudget(t, s, randomKey(t))
	}
}

// TestChargeModesSentinel: the same scenario through the client the service
// builds for Sentinel (redisclient.New, a failover client to the master
// the sentinels name).
func TestChargeModesSentinel(t *testing.T) {
	t.Parallel()
	sn := redistest.NewSentinel(t)
	c, err := redisclient.New(redisclient.Options{URL: "redis://:" + redistest.SentinelDataPassword + "@/0",
		SentinelAddrs: sn.Addrs, SentinelMaster: redistest.SentinelMaster, SentinelPassword: redistest.SentinelPassword})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	s, _ := fixedStore(t, c)
	playBudget(t, s, randomKey(t))
}

// A charged request never joins single.lua's batch, which cannot read its
// mode: concurrent forced charges on one standalone server (coalesced into
// shared round trips) all land, and concurrent checks charge nothing.
func TestCoalescedChargesAllLand(t *testing.T) {
	t.Parallel()
	_, c := standalone(t)
	s, _ := fixedStore(t, c)
	key := randomKey(t)
	for _, alg := range []ratelimit.Algorithm{ratelimit.GCRA, ratelimit.FixedWindow} {
		l := limitFor(alg, 100, time.Hour)
		var wg sync.WaitGroup
		for i := range 60 {
			wg.Go(func() {
				mode, hits := ratelimit.ChargeAlways, int64(3)
				if i%2 == 1 {
					mode, hits = ratelimit.ChargeNever, 1
				}
				if _, err := s.AllowBatch(context.Background(), []ratelimit.Request{{Key: key, Limits: []ratelimit.Limit{l}, Hits: hits, Charge: mode}}); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		// 30 charges of 3: 90 of 100 spent.
		res, err := s.Allow(context.Background(), key, l, 0)
		if err != nil || res.Remaining != 10 {
			t.Errorf("%s: after 30 charges of 3, remaining %d (%v), want 10", alg, res.Remaining, err)
		}
	}
}

// TestChargedRequestsRunTheirScript: single.lua reads a charge mode only
// for one fixed_window limit charged always (the peer's counting, the
// default of its users); every other charged request runs decide.lua.
func TestChargedRequestsRunTheirScript(t *testing.T) {
	t.Parallel()
	for _, m := range []ratelimit.ChargeMode{ratelimit.ChargeNever, ratelimit.ChargeAlways, ratelimit.ChargeReserve} {
		for _, alg := range []ratelimit.Algorithm{ratelimit.GCRA, ratelimit.FixedWindow} {
			r := ratelimit.Request{Key: "k", Hits: 1, Charge: m, Limits: []ratelimit.Limit{limitFor(alg, 10, time.Minute)}}
			want := alg == ratelimit.FixedWindow && m == ratelimit.ChargeAlways
			if sc := scriptFor(scriptArgs(r, 0)); (sc.SHA() == decideSingle.SHA()) != want {
				t.Errorf("one %s limit charged %s runs single.lua: %v, want %v", alg, m, !want, want)
			}
		}
		two := ratelimit.Request{Key: "k", Hits: 1, Charge: m, Limits: []ratelimit.Limit{
			limitFor(ratelimit.SlidingLog, 10, time.Minute), limitFor(ratelimit.SlidingLog, 10, time.Hour)}}
		if sc := scriptFor(scriptArgs(two, 0)); sc.SHA() != decideOnly[algCodes[ratelimit.SlidingLog]].SHA() {
			t.Errorf("two sliding_log limits charged %s do not run the sliding_log script (the mode read as a limit?)", m)
		}
	}
}

func TestRefundsOnlyWhenChargingAlways(t *testing.T) {
	t.Parallel()
	_, c := standalone(t)
	s := newStore(t, c)
	l := limitFor(ratelimit.FixedWindow, 10, time.Minute)
	for _, m := range []ratelimit.ChargeMode{ratelimit.ChargeIfAdmitted, ratelimit.ChargeNever, ratelimit.ChargeMode(9)} {
		_, err := s.AllowBatch(context.Background(), []ratelimit.Request{{Key: randomKey(t), Limits: []ratelimit.Limit{l}, Hits: -1, Charge: m}})
		if err == nil {
			t.Errorf("-1 hits in mode %s: no error", m)
		}
	}
}

// Trims and refunds remove sliding_log members by rank, leaving gaps in the
// indices at one instant: a later hit at that instant must still get a new
// member, or it would rescore an existing one and go uncounted.
func TestSlidingLogMembersStayUniqueAfterTrims(t *testing.T) {
	t.Parallel()
	_, c := standalone(t)
	s, _ := fixedStore(t, c) // every call at one instant
	key := randomKey(t)
	l := limitFor(ratelimit.SlidingLog, 5, time.Minute)
	for i, st := range []chargeStep{
		{ratelimit.ChargeAlways, 5, true, 0},  // #0..#4
		{ratelimit.ChargeAlways, 3, false, 0}, // #5..#7 added, #0..#2 trimmed
		{ratelimit.ChargeAlways, -1, true, 1}, // the highest rank goes
		{ratelimit.ChargeAlways, 1, true, 0},  // a fifth member, not #4 again
		{ratelimit.ChargeNever, 1, false, 0},
	} {
		d, err := s.AllowBatch(context.Background(), []ratelimit.Request{{Key: key, Limits: []ratelimit.Limit{l}, Hits: st.hits, Charge: st.mode}})
		if err != nil {
			t.Fatal(err)
		}
		if d[0].Allowed != st.allowed || d[0].Results[0].Remaining != st.left {
			t.Errorf("step %d (%s %d): allowed %v, remaining %d; want %v, %d",
				i, st.mode, st.hits, d[0].Allowed, d[0].Results[0].Remaining, st.allowed, st.left)
		}
	}
}
