package region

import (
	"context"
	"fmt"
	"maps"
	"math"
	"time"
)

// holdWindow names no window in an Ask: the grant script keeps both of the
// region's grants (it applies a value only to the window it is named for).
const holdWindow = -2

// maxShortRetries is how many turns in a row a region short of its fair
// share (the room is held by a region that has not given it back yet)
// exchanges again before its next regular exchange.
const maxShortRetries = 2

// exchange is a step's part across regions. One round trip when nothing
// shrinks: report the demand and grow towards the asks the last view
// predicts (that view with this region's new demand; no further than the
// region holds or would get whatever the others want), then mirror. When the
// prediction shrinks the region's grants, the local caps are lowered first
// and the same round trip applies the shrink, fenced by the generation of
// the last grant this replica saw. If the region's demand moved, they are
// lowered to the pessimistic asks (the share it would have if every other
// region wanted the whole limit: the others' demands may have moved with
// its own, in reports this view does not show), and a turn left short of
// the share the fresh view gives takes the rest back. When the fresh view
// shrinks what the prediction did not: lower, then a second round trip
// (Grant) with the generation just returned; when it gives more than the
// prediction asked, a second round trip grows. A retry (a turn short of
// its share) predicts nothing: what it wants may depend on a demand its
// last view did not show.
func (e *Exchanger) exchange(ctx context.Context, k string, r Rule, c claimed, demand float64, kind turnKind) (Outcome, error) {
	out := Outcome{Owner: true, Demand: demand}
	me := e.topo.Region
	ask, pessimistic, err := e.predict(ctx, k, r, c, demand, kind)
	if err != nil {
		return out, err
	}
	g, view, err := e.global.Exchange(ctx, k, r, e.topo, demand, ask)
	if err != nil {
		return out, err
	}
	fresh, target := e.asks(r, view, demand, c)
	out.Target = target
	switch {
	case fresh.Want < g.For(fresh.Window) || fresh.WantNext < g.For(fresh.Window+1):
		a, err := e.lower(ctx, k, r, fresh, g, target)
		if err != nil {
			return out, err
		}
		a.Gen = g.Gen
		if g, err = e.global.Grant(ctx, k, r, e.topo, a); err != nil {
			return out, err
		}
	case !pessimistic && e.underAsked(r, view, fresh, ask, g):
		// The prediction asked less than the fresh view gives (the first
		// exchange, or others' demands fell): grow now.
		fresh.Gen = g.Gen
		if g, err = e.global.Grant(ctx, k, r, e.topo, fresh); err != nil {
			return out, err
		}
	}
	out.Grants = g
	if _, _, err := e.local.setCaps(ctx, k, e.owner, "mirror", r, e.topo, g.Window, g.Budget, g.Next); err != nil {
		return out, fmt.Errorf("after the global grant: %w", err)
	}
	view.Grants[me] = g
	// Below the fresh share after a pessimistic shrink: the next turn takes
	// back what the others have not taken by then.
	below := pessimistic && e.underAsked(r, view, fresh, Ask{Window: holdWindow}, g)
	e.settled(k, r, view, below || e.short(r, view, fresh, target, g))
	return out, nil
}

// predict returns what an exchange asks before it sees the fresh view: on
// a retry, or without a view of its own, nothing (both grants held);
// otherwise the asks of its last view with its new demand, as exchange
// says, the local caps lowered first for a shrink. pessimistic says the
// shrink went to the pessimistic asks.
func (e *Exchanger) predict(ctx context.Context, k string, r Rule, c claimed, demand float64, kind turnKind) (ask Ask, pessimistic bool, err error) {
	prev, ok := e.lastView(k)
	if !ok || kind == turnRetry {
		return Ask{Window: holdWindow, Gen: -1}, false, nil
	}
	prev.Now, prev.Demands[e.topo.Region] = c.now, demand
	own := prev.Grants[e.topo.Region]
	a, _ := e.asks(r, prev, demand, c)
	p, floorShare := e.asks(r, e.pessimistic(prev), demand, c)
	w := a.Window
	if a.Want < own.For(w) || a.WantNext < own.For(w+1) {
		// Lower first. When the region's demand moved, to the pessimistic
		// asks: the others' may have moved with it.
		low, share := a, a.WantNext
		if kind == turnMoved {
			low, share, pessimistic = p, floorShare, true
		}
		if ask, err = e.lower(ctx, k, r, low, own, share); err != nil {
			return ask, false, err
		}
	} else {
		// Grow on a prediction only as far as the region holds already
		// (for the next window: its last next-window grant, a share) or
		// would get whatever the others want: beyond that, the room may be
		// another region's in a view this one has not seen.
		ask = a
		ask.Want = min(a.Want, max(p.Want, own.For(w)))
		ask.WantNext = min(a.WantNext, max(p.WantNext, own.Next))
	}
	ask.Gen = own.Gen
	return ask, pessimistic, nil
}

// asks is what the region asks of view's division with its demand: its
// fair share for the next window, and rest for the current one when the
// claim counted it.
func (e *Exchanger) asks(r Rule, view View, demand float64, c claimed) (Ask, int64) {
	w := r.Window(view.Now)
	target := Target(view.Demands, r, e.topo)
	a := Ask{Window: w, Want: target, WantNext: target}
	if c.window == w {
		a.Want = rest(r, target, demand, c.used, view.Now)
	}
	return a, target
}

// pessimistic is view with every other region wanting the whole limit.
func (e *Exchanger) pessimistic(view View) View {
	d := map[string]float64{}
	for _, name := range e.topo.Regions {
		d[name] = math.Inf(1)
	}
	for name := range view.Demands {
		d[name] = math.Inf(1)
	}
	for name := range view.Grants {
		d[name] = math.Inf(1)
	}
	d[e.topo.Region] = view.Demands[e.topo.Region]
	view.Demands = d
	return view
}

// lower lowers the local caps of the windows where a is below own, never
// below what they admitted, and returns the ask that the global shrink may
// apply: what the caps were lowered to, or target if more.
func (e *Exchanger) lower(ctx context.Context, k string, r Rule, a Ask, own Grants, target int64) (Ask, error) {
	w := a.Window
	if a.Want >= own.For(w) && a.WantNext >= own.For(w+1) {
		return a, nil
	}
	want, next, err := e.local.setCaps(ctx, k, e.owner, "lower", r, e.topo, w,
		min(a.Want, own.For(w)), min(a.WantNext, own.For(w+1)))
	if err != nil {
		return a, err
	}
	a.Want, a.WantNext = max(want, target), max(next, target)
	return a, nil
}

// underAsked says whether fresh wants more than grants g in a window for
// which the exchange asked less than fresh, and view shows room for more
// there (the limit less the others' grants and floors).
func (e *Exchanger) underAsked(r Rule, view View, fresh, asked Ask, g Grants) bool {
	for _, x := range []int64{fresh.Window, fresh.Window + 1} {
		want := fresh.value(x, g)
		if e.grantable(r, view, x) && want > g.For(x) && want > asked.value(x, g) && e.room(r, view, x) > g.For(x) {
			return true
		}
	}
	return false
}

// room is what view leaves this region of window x.
func (e *Exchanger) room(r Rule, view View, x int64) int64 {
	room := r.Limit
	regions := map[string]bool{}
	for _, name := range e.topo.Regions {
		regions[name] = true
	}
	for name := range view.Grants {
		regions[name] = true
	}
	for name := range view.Demands {
		regions[name] = true
	}
	for name := range regions {
		if name != e.topo.Region {
			room -= max(view.Grants[name].For(x), r.FloorHits())
		}
	}
	return room
}

// value is what a asks for window x: its value for x, or the grant held.
func (a Ask) value(x int64, g Grants) int64 {
	switch x {
	case a.Window:
		return a.Want
	case a.Window + 1:
		return a.WantNext
	}
	return g.For(x)
}

// short says whether grants g leave the region more than a hit short of
// what the fresh view gives it (for the current window, its ask up to its
// share; for the next one once granted, within the lease of its start, its
// share) while another region holds more of that window than its share
// and than its own demand needs: room that region's next exchange gives
// back.
func (e *Exchanger) short(r Rule, view View, fresh Ask, target int64, g Grants) bool {
	w := fresh.Window
	if g.For(w)+1 < min(fresh.Want, target) && e.overHeld(r, view, w) {
		return true
	}
	return e.grantable(r, view, w+1) && g.For(w+1)+1 < target && e.overHeld(r, view, w+1)
}

// grantable says whether the global store grants window x at view's time:
// the current window, and the next within the lease of its start.
func (e *Exchanger) grantable(r Rule, view View, x int64) bool {
	w := r.Window(view.Now)
	return x == w || x == w+1 && (w+1)*r.PeriodMS()-view.Now.UnixMilli() <= e.topo.Lease.Milliseconds()
}

// overHeld says whether another region that exchanges (its demand is live
// in view) holds more of window x than both its share in view and what its
// demand keeps (as rest keeps it). A region whose demand lapsed is not
// exchanging (backed off as alone, cut off, or gone): it gives nothing back
// before its next exchange, so a retry would only cross the WAN again.
func (e *Exchanger) overHeld(r Rule, view View, x int64) bool {
	for name, g := range view.Grants {
		if _, live := view.Demands[name]; name == e.topo.Region || !live {
			continue
		}
		t := e.topo
		t.Region = name
		keeps := view.Demands[name]*keepHeadroom + restSlack
		if held := g.For(x); held > Target(view.Demands, r, t)+1 && float64(held) > keeps {
			return true
		}
	}
	return false
}

// lastView returns a copy of the view k's last exchange on this replica
// ended with.
func (e *Exchanger) lastView(k string) (View, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.keys[k]
	if !ok || t.view == nil {
		return View{}, false
	}
	return View{Now: t.view.Now, Demands: maps.Clone(t.view.Demands), Grants: maps.Clone(t.view.Grants)}, true
}

// settled records the view k's exchange ended with, and whether the region
// is short of its share in it. The next exchange comes no later than the
// renewal (renewIn), and a key used in this region only for two exchanges
// in a row is next due later (soloDelay).
func (e *Exchanger) settled(k string, r Rule, view View, short bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.keys[k]
	if !ok {
		return
	}
	t.view, t.short = &view, short
	now := e.clock()
	renew, renewing := e.renewIn(r, view)
	if renewing {
		t.due = earlier(t.due, now.Add(renew))
	}
	if !e.alone(r, view) {
		t.solo = 0
		return
	}
	t.solo++
	if d, ok := e.soloDelay(r, view, t.solo, renew, renewing); ok {
		t.due = later(t.due, now.Add(d))
	}
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// renewIn is how long after view's time the first window the region holds
// no grant for becomes grantable, and a tick more: the exchange that grants
// it is due then at the latest. The store grants only the current window
// and the next (within the lease of its start), so a key whose exchanges
// came an interval apart could skip a window's renewal when the interval is
// about the window or longer (a turn a tick late, a step of two round
// trips), and start that window on its floor (end to end, 1 s windows and
// interval, 300 ms round trips: 167 of 210 in two windows of eight). ok is
// false when that window is grantable already (its grant was not made: no
// room; the regular schedule retries).
func (e *Exchanger) renewIn(r Rule, view View) (time.Duration, bool) {
	w := r.Window(view.Now)
	unheld := w + 1
	if e.grantable(r, view, w+1) {
		unheld = w + 2
	}
	start := func(x int64) time.Time { return time.UnixMilli(x * r.PeriodMS()) }
	// Grantable once it is the next window and within the lease of its start.
	grantable := start(unheld).Add(-e.topo.Lease)
	if prev := start(unheld - 1); grantable.Before(prev) {
		grantable = prev
	}
	in := grantable.Add(tick(e.topo)).Sub(view.Now)
	return in, in > 0
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// alone says whether view shows the key used in this region only: no other
// region reports demand, and none holds more than its floor of the current
// or the next window (what another region gave back is taken first).
func (e *Exchanger) alone(r Rule, view View) bool {
	for name, d := range view.Demands {
		if name != e.topo.Region && d > 0 {
			return false
		}
	}
	w := r.Window(view.Now)
	for name, g := range view.Grants {
		if name != e.topo.Region && max(g.For(w), g.For(w+1)) > r.FloorHits() {
			return false
		}
	}
	return true
}

// soloDelay is how long after an exchange a key alone in this region for
// solo exchanges in a row waits for its next one (ok is false: the interval,
// as any key). Only other regions' demand needs an exchange before the
// first window this region holds no grant for becomes grantable, so the
// delay doubles from the interval up to Topology.Solo, and ends no later
// than
//   - renew (renewIn): a tick after that window becomes grantable, which
//     leaves the rest of the lease for the regular retries of a failed step
//     before the window starts;
//   - a last look before the current window ends (a tick and a round trip
//     before it, the round trip as the lease allows: (Lease - Interval)/2):
//     a region whose demand began since is seen while the grant this one
//     holds for the next window can still be lowered.
//
// The bound does not read the schedule. What the back-off costs is that a
// region whose demand for the key begins may wait up to Solo for more than
// its floor where the other region's demand leaves it room.
func (e *Exchanger) soloDelay(r Rule, view View, solo int, renew time.Duration, renewing bool) (time.Duration, bool) {
	if solo < 2 || e.topo.Solo <= e.topo.Interval {
		return 0, false
	}
	if !renewing {
		return 0, true // grantable and not held: as any key
	}
	delay := min(e.topo.Interval<<min(solo-1, 20), e.topo.Solo, renew)
	w := r.Window(view.Now)
	look := time.UnixMilli((w + 1) * r.PeriodMS()).Add(-tick(e.topo) - (e.topo.Lease-e.topo.Interval)/2)
	if lookIn := look.Sub(view.Now); lookIn > 0 {
		delay = min(delay, lookIn)
	}
	return delay, true
}
