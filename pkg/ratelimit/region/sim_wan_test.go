package region

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/testclock"
)

// wan schedules a simulation's round trips to the global store on its
// virtual clock. Each region's exchanger turns in its own goroutine; a
// command to the global store sleeps on the virtual clock on its way there
// and back. The simulation's loop moves the clock only when every such
// goroutine is asleep or done (settle), so what happens at a virtual instant
// does not depend on the machine's speed; two commands that reach the global
// store at the same instant land in either order, as across a real WAN.
type wan struct {
	clock    *testclock.Clock
	mu       sync.Mutex
	cond     *sync.Cond
	running  int
	sleepers []sleeper
}

type sleeper struct {
	at   time.Time
	wake chan struct{}
}

func newWAN(clock *testclock.Clock) *wan {
	w := &wan{clock: clock}
	w.cond = sync.NewCond(&w.mu)
	return w
}

// sleep blocks the calling goroutine (one started by go) for d of virtual
// time.
func (w *wan) sleep(d time.Duration) {
	w.mu.Lock()
	s := sleeper{at: w.clock.Now().Add(d), wake: make(chan struct{})}
	w.sleepers = append(w.sleepers, s)
	w.running--
	w.cond.Broadcast()
	w.mu.Unlock()
	<-s.wake
}

// goroutine runs f in a goroutine the scheduler waits for; done runs
// under the scheduler's lock once f has returned.
func (w *wan) goroutine(f func(), done func()) {
	w.mu.Lock()
	w.running++
	w.mu.Unlock()
	go func() {
		f()
		w.mu.Lock()
		done()
		w.running--
		w.cond.Broadcast()
		w.mu.Unlock()
	}()
}

// settle wakes the sleepers whose time has come and waits until every
// goroutine is asleep again or done.
func (w *wan) settle() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		now, woke := w.clock.Now(), false
		kept := make([]sleeper, 0, len(w.sleepers))
		for _, s := range w.sleepers {
			if s.at.After(now) {
				kept = append(kept, s)
				continue
			}
			w.running++
			close(s.wake)
			woke = true
		}
		w.sleepers = kept
		for w.running > 0 {
			w.cond.Wait()
		}
		if !woke {
			return
		}
	}
}

// withWAN makes every region's link to the global store take rtt per
// command (half each way), its exchanger turn in its own goroutine, and the
// global store's clock the instant a command reaches it.
func (s *sim) withWAN(rtt time.Duration) {
	s.wan = newWAN(s.clock)
	for _, r := range s.regions {
		r.link.wan, r.link.oneWay = s.wan, rtt/2
		r.ex.global.now = func() time.Time { return s.clock.Now().Add(rtt / 2) }
	}
}

// turnAcrossWAN is one step of the simulation's exchanges with WAN latency:
// round trips due go on; on a tick every region's exchanger turns once, or
// as soon as its turn under way ends (Run's ticker holds one tick).
func (s *sim) turnAcrossWAN(tick bool) {
	s.wan.settle()
	for _, r := range s.regions {
		if r.err != nil {
			s.t.Fatalf("%s: exchange: %v", r.name, r.err)
		}
		r.pending = r.pending || tick
		if !r.pending || r.busy {
			continue
		}
		r.pending, r.busy = false, true
		var (
			out        Outcome
			done       bool
			err        error
			regionTurn = r
		)
		s.wan.goroutine(func() {
			out, done, err = regionTurn.ex.Tick(context.Background(), s.key, s.rule)
		}, func() {
			regionTurn.busy = false
			switch {
			case done && err == nil:
				regionTurn.count(out)
			case err != nil && !errors.Is(err, errCut):
				regionTurn.err = err
			}
		})
	}
	s.wan.settle()
}

// idleTurns runs the simulation until no region's turn is under way (at
// most a second), so that what crossed the WAN and the exchanges made can
// be counted at the same instant.
func (s *sim) idleTurns() {
	for end := s.clock.Now().Add(time.Second); s.clock.Now().Before(end); {
		busy := false
		for _, r := range s.regions {
			busy = busy || r.busy
		}
		if !busy {
			return
		}
		s.run(s.dt)
	}
	s.t.Fatal("a turn was under way for a second")
}

// The end-to-end test's timing on the virtual clock: a 500 ms interval,
// 1.5 s lease, 200 ms round trips to the global store.
const (
	wanInterval = 500 * time.Millisecond
	wanLease    = 1500 * time.Millisecond
	wanRTT      = 200 * time.Millisecond
)

// Across a WAN of 200 ms round trips with a 500 ms interval, demand moving
// from one region to the other part-way through an interval is followed
// within two intervals, whichever region steps first and whichever report
// lands first at the global store; no window goes over.
func TestSimWANShiftFollowedInTwoIntervals(t *testing.T) {
	for _, offset := range []float64{0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.1, 1.25, 1.5, 1.75} {
		for _, to := range []string{"us", "eu"} {
			t.Run(fmt.Sprintf("offset=%.2f/to=%s", offset, to), func(t *testing.T) {
				t.Parallel()
				s := newSim(t, simRule, wanInterval, wanLease, "eu", "us")
				s.withWAN(wanRTT)
				receiver, giver := s.shiftPair(to)
				start := s.window()
				s.run(2 * time.Second)
				// Steady demand: one round trip per exchange (counted between
				// instants with no turn under way).
				s.idleTurns()
				calls0, exchanges0 := receiver.link.calls.Load()+giver.link.calls.Load(), receiver.exchanges+giver.exchanges
				s.run(time.Second)
				s.idleTurns()
				calls, exchanges := receiver.link.calls.Load()+giver.link.calls.Load()-calls0, receiver.exchanges+giver.exchanges-exchanges0
				if calls != int64(exchanges) {
					t.Errorf("steady demand: %d round trips to the global store for %d exchanges, want one each", calls, exchanges)
				}
				s.runTo(100*time.Millisecond + time.Duration(offset*float64(wanInterval)/2))
				receiver.rate, giver.rate = 900, 300
				// Within 1 % of the limit: a tick holds 37.5 of the giver's hits,
				// so its measured demand, and the receiver's share, move by a
				// few hits from one reading to the next.
				took := s.reach(receiver, giver, 700, 10)
				t.Logf("%s's cap reached its new share %v (%.2f intervals) after the shift", to, took, float64(took)/float64(wanInterval))
				if took < 0 || took > 2*wanInterval {
					t.Errorf("%s's cap reached its new share after %v, want within two intervals (%v)", to, took, 2*wanInterval)
				}
				s.run(3 * time.Second)
				t.Logf("exchanges early: %s %d, %s %d; retries %d, %d", to, receiver.early, giver.name, giver.early, receiver.retries, giver.retries)
				if got := receiver.admitted[s.window()-1]; got < 690 || got > 710 {
					t.Errorf("%s admitted %d in the last window after the shift, want its share 700", to, got)
				}
				s.checkNeverOver(start, s.window())
			})
		}
	}
}
