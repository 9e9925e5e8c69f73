package region

import (
	"math/rand/v2"
	"testing"
	"time"
)

// simSolo is the simulation's Topology.Solo: eight intervals.
const simSolo = 8 * simInterval

// soloSim is a two-region simulation of rule whose exchangers back off keys
// used in one region only for up to solo (0: no back-off).
func soloSim(t *testing.T, rule Rule, solo time.Duration) *sim {
	t.Helper()
	s := newSim(t, rule, simInterval, simLease, "eu", "us")
	for _, r := range s.regions {
		r.ex.topo.Solo = solo
	}
	return s
}

// A key used in one region only is exchanged far less often once its
// exchanges see no other region (Topology.Solo), and that region still
// admits the whole limit less the other's floor in every window: the next
// window's grant is asked for as soon as it can be made. With 1 s windows
// (about the back-off) and with 10 s windows (many times it).
func TestSimSoloKeyBacksOff(t *testing.T) {
	for _, rule := range []Rule{simRule, {Limit: 10_000, Period: 10 * time.Second, Floor: 0.05}} {
		exchanges := map[time.Duration]int{}
		span := max(5*time.Second, 2*rule.Period)
		for _, solo := range []time.Duration{0, simSolo} {
			s := soloSim(t, rule, solo)
			eu := s.region("eu")
			eu.rate = 2 * float64(rule.Limit) / rule.Period.Seconds()
			s.run(2 * rule.Period)
			from, before := s.window(), eu.exchanges
			s.run(span)
			exchanges[solo] = eu.exchanges - before
			for w := from; w < s.window(); w++ {
				if want := s.rule.Limit - s.rule.FloorHits(); eu.admitted[w] != want {
					t.Errorf("%v windows, solo %v: eu alone admitted %d in window %d, want the limit less us's floor (%d)", rule.Period, solo, eu.admitted[w], w-from, want)
				}
			}
			s.checkNeverOver(from, s.window())
		}
		// Backing off: one exchange per Solo, and two a window (the next
		// window's grant, the last look before the window ends).
		most := int(span/simSolo) + 2*int(span/rule.Period) + 2
		t.Logf("%v windows: eu's exchanges alone over %v: %d every interval, %d backing off up to %v (at most %d)",
			rule.Period, span, exchanges[0], exchanges[simSolo], simSolo, most)
		if exchanges[0] < int(span/simInterval)*9/10 {
			t.Fatalf("without back-off eu exchanged %d times, want one an interval: the control is broken", exchanges[0])
		}
		if exchanges[simSolo] > most {
			t.Errorf("%v windows: backing off, eu exchanged %d times, want at most %d (against %d every interval)", rule.Period, exchanges[simSolo], most, exchanges[0])
		}
	}
}

// When a second region's demand for a backed-off key begins, every window
// that starts Solo and two intervals later is shared fairly (the first
// region sees the demand at its next exchange, at most Solo later, and gives
// back; the second takes it at its next), against two intervals without the
// back-off; the first region leaves the back-off, and no window is over.
func TestSimSoloKeyJoinedWithinSolo(t *testing.T) {
	for _, solo := range []time.Duration{0, simSolo} {
		for _, offset := range []time.Duration{0, 250 * time.Millisecond, 500 * time.Millisecond, 750 * time.Millisecond} {
			s := soloSim(t, simRule, solo)
			eu, us := s.region("eu"), s.region("us")
			eu.rate = 2000
			start := s.window()
			s.run(3*time.Second + offset)
			began, before := s.clock.Now(), us.exchanges
			us.rate = 900 // max-min fair: 500 each
			held := s.holdShare(us, 500)
			s.run(2*time.Second - held)
			end := s.window()
			s.checkNeverOver(start, end)
			fair := s.rule.Window(began.Add(solo+2*simInterval-time.Millisecond)) + 1
			for w := fair; w < end; w++ {
				if eu.admitted[w] != 500 || us.admitted[w] != 500 {
					t.Errorf("solo %v, offset %v: window %d (starting %v after us's demand began): %s, want 500 each",
						solo, offset, w-start, time.UnixMilli(w*s.rule.PeriodMS()).Sub(began), s.perRegion(w))
				}
			}
			if eu.ex.keys[s.key].solo != 0 {
				t.Errorf("solo %v, offset %v: eu still counts the key solo (%d) with us asking", solo, offset, eu.ex.keys[s.key].solo)
			}
			t.Logf("solo %v, offset %v: us held its share for a window %v after its demand began; us exchanged %d times in 2 s",
				solo, offset, held, us.exchanges-before)
			// Short while eu over-holds, us retries only while eu exchanges:
			// retries into a backed-off region would only cross the WAN.
			if n := us.exchanges - before; n > 20+2*maxShortRetries {
				t.Errorf("solo %v, offset %v: us exchanged %d times in 2 s (20 intervals), want at most %d", solo, offset, n, 20+2*maxShortRetries)
			}
		}
	}
}

// holdShare runs until r holds a grant of share (less a hit) for the
// current or the next window and returns how long that took; -1 when not
// within 2s. A region asking for more than its floor mid-window gets little
// of that window when the other has spent its grant already: holding its
// share for the next one is what following means here.
func (s *sim) holdShare(r *simRegion, share int64) time.Duration {
	start := s.clock.Now()
	for s.clock.Now().Sub(start) < 2*time.Second {
		s.run(s.dt)
		if w := s.window(); max(r.last.Grants.For(w), r.last.Grants.For(w+1)) >= share-1 {
			return s.clock.Now().Sub(start) - s.dt
		}
	}
	return -1
}

// Keys that are used in one region for a while, then in several, at random,
// with random cuts, for three regions backing off: never over the limit in
// any window, a cut-off region never above its floor once its grants
// lapsed, and the back-off taken many times.
func TestSimSoloRandomJoinsAndCuts(t *testing.T) {
	s := newSim(t, simRule, simInterval, simLease, "ap", "eu", "us")
	for _, r := range s.regions {
		r.ex.topo.Solo = simSolo
	}
	rng := rand.New(rand.NewPCG(39, 2))
	start := s.window()
	cutSince := map[string]int64{}
	backedOff := 0
	for range 40 {
		alone := s.regions[rng.IntN(len(s.regions))]
		single := rng.IntN(2) == 0
		for _, r := range s.regions {
			r.rate = float64(rng.IntN(2000))
			if single && r != alone {
				r.rate = 0
			}
			s.setCut(r, rng.IntN(8) == 0, cutSince)
		}
		s.run(time.Duration(1+rng.IntN(20)) * simInterval)
		for _, r := range s.regions {
			if k, ok := r.ex.keys[s.key]; ok && k.solo >= 2 {
				backedOff++
			}
		}
		s.checkCutOffAtFloor(cutSince, start)
	}
	s.checkNeverOver(start, s.window()+1)
	t.Logf("per window %v; a region backed off alone at the end of %d of 40 segments", s.totals(start, s.window()), backedOff)
	if backedOff < 5 {
		t.Errorf("a region backed off at the end of only %d segments: the back-off was hardly exercised", backedOff)
	}
}
