package region

import (
	"math/rand/v2"
	"testing"
	"time"
)

// Three regions, 3:1:0, then the demand moves to the idle region in the
// middle of an exchange interval.
func TestSimThreeRegionsShiftMidInterval(t *testing.T) {
	s := newSim(t, simRule, simInterval, simLease, "ap", "eu", "us")
	ap, eu, us := s.region("ap"), s.region("eu"), s.region("us")
	eu.rate, us.rate = 900, 300
	start := s.window()
	s.run(3 * time.Second)
	// ap reports no demand: its floor (50) stays reserved, the other 950
	// are divided: us 300, eu 650.
	if eu.last.Target != 650 || us.last.Target != 300 || ap.last.Target != 50 {
		t.Errorf("targets eu=%d us=%d ap=%d, want 650, 300, 50", eu.last.Target, us.last.Target, ap.last.Target)
	}
	s.run(simInterval / 2)
	eu.rate, ap.rate = 0, 900 // eu's demand moves to ap, mid-interval
	followed := s.follow(ap, eu, 650)
	t.Logf("mid-interval shift followed after %v", followed)
	// The readings a tick apart see the move within two or three ticks,
	// and the exchange follows it at once.
	if followed < 0 || followed > 2*simInterval {
		t.Errorf("shift followed after %v, want within two intervals (%v)", followed, 2*simInterval)
	}
	s.run(3 * time.Second)
	end := s.window()
	s.checkNeverOver(start, end)
	// us's idle floor (5 %) is the only part left unused.
	if u := s.utilisation(end-2, end); u < 0.95 {
		t.Errorf("utilisation %.3f after the shift, want >= 0.95", u)
	}
	t.Logf("per window %v; last window %s", s.totals(start, end), s.perRegion(end-1))
}

// A cut-off region keeps at most its last grants until they lapse, then its
// floor; the others never get its floor; never over in any window; and it
// comes back to its share after the partition heals.
func TestSimPartition(t *testing.T) {
	s := newSim(t, simRule, simInterval, simLease, "eu", "us")
	eu, us := s.region("eu"), s.region("us")
	eu.rate, us.rate = 900, 1200
	start := s.window()
	s.run(2*time.Second + 400*time.Millisecond)
	eu.link.cut.Store(true)
	cutWindow := s.window()
	held := eu.last.Grants
	s.run(3 * time.Second)
	for w := cutWindow; w < s.window(); w++ {
		limit := max(held.For(w), s.rule.FloorHits())
		if got := eu.admitted[w]; got > limit {
			t.Errorf("window %d after the cut: eu admitted %d, above its last grant or floor %d", w-cutWindow, got, limit)
		}
		if got := us.admitted[w]; got > s.rule.Limit-s.rule.FloorHits() {
			t.Errorf("window %d after the cut: us admitted %d, into eu's floor", w-cutWindow, got)
		}
	}
	// The grant held lapses with its window: two windows on, only the floor.
	if got := eu.admitted[cutWindow+2]; got != s.rule.FloorHits() {
		t.Errorf("eu admitted %d two windows after the cut, want exactly its floor %d", got, s.rule.FloorHits())
	}
	if got := us.admitted[cutWindow+2]; got != s.rule.Limit-s.rule.FloorHits() {
		t.Errorf("us admitted %d while eu is cut off, want all but eu's floor (%d)", got, s.rule.Limit-s.rule.FloorHits())
	}
	eu.link.cut.Store(false)
	s.run(3 * time.Second)
	end := s.window()
	s.checkNeverOver(start, end)
	if eu.admitted[end-1] != 500 || us.admitted[end-1] != 500 {
		t.Errorf("after the partition healed: %s, want 500 each", s.perRegion(end-1))
	}
	t.Logf("per window %v", s.totals(start, end))
}

// The global store down for everyone: each region keeps its grants until
// they lapse, then its floor.
func TestSimGlobalStoreDown(t *testing.T) {
	s := newSim(t, simRule, simInterval, simLease, "eu", "us")
	eu, us := s.region("eu"), s.region("us")
	eu.rate, us.rate = 900, 300
	start := s.window()
	s.run(2*time.Second + 800*time.Millisecond) // within the lease: next window granted
	for _, r := range s.regions {
		r.link.cut.Store(true)
	}
	down := s.window()
	heldEU, heldUS := eu.last.Grants, us.last.Grants
	if heldEU.For(down+1) == 0 {
		t.Fatalf("eu holds no grant for the next window at the outage: %+v", heldEU)
	}
	s.run(3 * time.Second)
	s.checkNeverOver(start, s.window())
	for w := down; w < s.window(); w++ {
		for _, c := range []struct {
			r    *simRegion
			held Grants
		}{{eu, heldEU}, {us, heldUS}} {
			if got, limit := c.r.admitted[w], max(c.held.For(w), s.rule.FloorHits()); got > limit {
				t.Errorf("window %d of the outage: %s admitted %d, above its last grant or floor %d", w-down, c.r.name, got, limit)
			}
		}
	}
	if eu.admitted[down+1] != heldEU.For(down+1) {
		t.Errorf("eu admitted %d in the window after the outage began, want the grant it held for it (%d)", eu.admitted[down+1], heldEU.For(down+1))
	}
	if eu.admitted[down+2] != s.rule.FloorHits() || us.admitted[down+2] != s.rule.FloorHits() {
		t.Errorf("once the grants lapsed: %s, want the floors (%d each)", s.perRegion(down+2), s.rule.FloorHits())
	}
	t.Logf("per window %v", s.totals(start, s.window()))
}

// A key used in one region only: that region gets the whole limit less the
// other regions' floors, and demand below the limit is all admitted.
func TestSimOneRegionAndLowDemand(t *testing.T) {
	s := newSim(t, simRule, simInterval, simLease, "ap", "eu", "us")
	eu := s.region("eu")
	eu.rate = 2000
	s.run(3 * time.Second)
	if want := s.rule.Limit - 2*s.rule.FloorHits(); eu.admitted[s.window()-1] != want {
		t.Errorf("eu alone admitted %d in a window, want the limit less two floors, %d", eu.admitted[s.window()-1], want)
	}
	eu.rate = 400
	s.region("us").rate = 300
	s.run(2 * time.Second)
	w := s.window() - 1
	if s.total(w) != 700 {
		t.Errorf("demand 700/s under the limit: %s admitted, want all of it", s.perRegion(w))
	}
}

// The demand moves late in a window, after the shrinking region has spent
// more than its new share: what it spent stays its own in that window (its
// grant shrinks to what it admitted, never below), the other grows only
// into the rest, and the window stays within the limit.
func TestSimShiftAfterSpending(t *testing.T) {
	s := newSim(t, simRule, simInterval, simLease, "eu", "us")
	eu, us := s.region("eu"), s.region("us")
	eu.rate, us.rate = 900, 300
	start := s.window()
	s.run(2*time.Second + 600*time.Millisecond)
	shifted := s.window()
	spent := eu.admitted[shifted]
	if spent <= 300 {
		t.Fatalf("eu admitted %d before the shift, want more than its new share 300 for this test", spent)
	}
	eu.rate, us.rate = 300, 900
	s.run(2 * time.Second)
	s.checkNeverOver(start, s.window())
	if got := us.admitted[shifted]; got > s.rule.Limit-spent {
		t.Errorf("us admitted %d in the window of the shift, more than eu's spending (%d) left", got, spent)
	}
	if got := us.admitted[shifted+1]; got != 700 {
		t.Errorf("us admitted %d in the window after the shift, want its share 700", got)
	}
	t.Logf("window of the shift: %s; the next: %s", s.perRegion(shifted), s.perRegion(shifted+1))
}

// Random demand that changes every few intervals, and random cuts of each
// region's link, for three regions: never over the limit in any window, and
// a cut-off region never above its floor once its grants lapsed.
func TestSimRandomDemandAndCuts(t *testing.T) {
	s := newSim(t, simRule, simInterval, simLease, "ap", "eu", "us")
	rng := rand.New(rand.NewPCG(39, 1))
	start := s.window()
	cutSince := map[string]int64{}
	for range 60 {
		for _, r := range s.regions {
			r.rate = float64(rng.IntN(1200))
			s.setCut(r, rng.IntN(6) == 0, cutSince)
		}
		s.run(time.Duration(1+rng.IntN(5)) * simInterval)
		s.checkCutOffAtFloor(cutSince, start)
	}
	s.checkNeverOver(start, s.window()+1)
	t.Logf("per window %v", s.totals(start, s.window()))
}

// setCut cuts r's link to the global store or restores it, recording in
// cutSince the window a cut began.
func (s *sim) setCut(r *simRegion, cut bool, cutSince map[string]int64) {
	if cut && !r.link.cut.Load() {
		cutSince[r.name] = s.window()
	}
	r.link.cut.Store(cut)
}

// checkCutOffAtFloor fails for a region cut off since two windows or more
// that admitted more than its floor in the current window.
func (s *sim) checkCutOffAtFloor(cutSince map[string]int64, start int64) {
	for _, r := range s.regions {
		if since, ok := cutSince[r.name]; ok && r.link.cut.Load() && s.window() >= since+2 {
			if got := r.admitted[s.window()]; got > s.rule.FloorHits() {
				s.t.Errorf("%s cut off since window %d admitted %d in window %d, above its floor", r.name, since-start, got, s.window()-start)
			}
		}
	}
}
