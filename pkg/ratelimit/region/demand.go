package region

import (
	"math"
	"time"
)

// ticksPerInterval is how often per exchange interval the exchanger turns:
// at each turn a key is exchanged when its interval is up, and otherwise
// its lease holder reads the region's count of hits asked (one script on the
// region's Redis, nothing across regions) to see whether its demand moved.
const ticksPerInterval = 4

// tick is the time between two turns of the exchanger.
func tick(t Topology) time.Duration { return t.Interval / ticksPerInterval }

// tracked is one key the exchanger follows: its rule, the readings its
// demand is measured from, and when it is next exchanged.
type tracked struct {
	rule Rule
	// asked and at: the region's count of hits asked at the last exchange,
	// and the region's clock then; measured is false before the first.
	asked    int64
	at       time.Time
	measured bool
	// readings are the last counts read, a tick apart, newest last.
	readings []reading
	// reported is the demand the last exchange reported, hits per window
	// (+Inf: not measured yet).
	reported float64
	// due is when (the exchanger's clock) the next regular exchange is due.
	due time.Time
	// early says the last exchange came before its interval because the
	// demand moved: the next one waits for its interval.
	early bool
	// refine says the last exchange reported a move still unfolding (its
	// last tick alone): the next tick reports the two ticks since.
	refine bool
	// owner says this replica held the key's exchanger lease at its last
	// claim: only then does it read the count between exchanges.
	owner bool
	// idle counts the exchanges in a row that saw no hit asked and no live
	// RLQS demand (in the region, by the lease holder; on this replica, by
	// the others): after idleSteps the key is dropped and its grants lapse.
	idle int
	// hit says this replica decided the key since its last exchange step.
	hit bool
	// view is the global view the last exchange on this replica ended
	// with (its own grants those it mirrored): the next one predicts from it.
	view *View
	// short says that exchange left the region short of its share (another
	// region had not given it back yet); retries counts the turns in a row
	// that exchanged again for it.
	short   bool
	retries int
	// solo counts the exchanges in a row whose view showed the key used in
	// this region only (alone): from two on, its exchanges back off.
	solo int
}

// reading is the region's count of hits asked of a key at a time of the
// region's clock.
type reading struct {
	at    time.Time
	asked int64
}

// keptReadings is how many readings recent looks at: two ticks' worth.
const keptReadings = 3

// read appends one reading, forgetting the oldest; a count that went down
// (the key's hash expired and began again) forgets every earlier one.
func (t *tracked) read(at time.Time, asked int64) {
	if n := len(t.readings); n > 0 && asked < t.readings[n-1].asked {
		t.readings = t.readings[:0]
	}
	if len(t.readings) == keptReadings {
		copy(t.readings, t.readings[1:])
		t.readings = t.readings[:keptReadings-1]
	}
	t.readings = append(t.readings, reading{at: at, asked: asked})
}

// recent is what the last two ticks' readings say of the demand.
type recent struct {
	// known is false before two ticks were read.
	known bool
	// two and last are the demand over the two ticks and over the last,
	// hits per window.
	two, last float64
	// moved says the two ticks' demand differs from the demand last
	// reported by more than a third and by more than noise (three standard
	// deviations of a Poisson count of the larger of the hits expected and
	// the hits asked). Two ticks, not one, decide, so that one burst or one
	// stall does not move the region's share.
	moved bool
	// unfolding says the move began within the older tick: its demand lies
	// between the old and the last tick's.
	unfolding bool
}

// since is the demand since the move: the last tick's while it unfolds,
// else the two ticks'.
func (m recent) since() float64 {
	if m.unfolding {
		return m.last
	}
	return m.two
}

func (t *tracked) recent(r Rule, tk time.Duration) recent {
	if len(t.readings) < keptReadings {
		return recent{}
	}
	first, mid, last := t.readings[0], t.readings[1], t.readings[2]
	span := last.at.Sub(first.at)
	if span < tk || !mid.at.After(first.at) || !last.at.After(mid.at) {
		return recent{}
	}
	rate := func(a, b reading) float64 {
		return float64(b.asked-a.asked) * float64(r.Period) / float64(b.at.Sub(a.at))
	}
	m := recent{known: true, two: rate(first, last), last: rate(mid, last)}
	if math.IsInf(t.reported, 1) {
		return m
	}
	asked := float64(last.asked - first.asked)
	expected := t.reported * float64(span) / float64(r.Period)
	diff, top := math.Abs(asked-expected), max(asked, expected)
	m.moved = diff > movedNoise*math.Sqrt(top) && diff > top*movedShare
	m.unfolding = m.moved && math.Abs(m.last-t.reported) > math.Abs(rate(first, mid)-t.reported)
	return m
}

// A move is past noise (movedNoise standard deviations) and at least
// movedShare of the larger of the two demands.
const (
	movedNoise = 3
	movedShare = 1.0 / 3
)

// sinceLast is the demand over the time since the last exchange, hits per
// window; +Inf (not measured yet: compete for a fair share) on the first
// and after the count began again.
func (t *tracked) sinceLast(r Rule, c claimed) float64 {
	elapsed := c.now.Sub(t.at)
	if !t.measured || elapsed <= 0 || c.asked < t.asked {
		return math.Inf(1)
	}
	return float64(c.asked-t.asked) * float64(r.Period) / float64(elapsed)
}

// observe records the reading of a claim of k and says whether to exchange
// now, with which demand. On a regular turn (due): the demand since the
// last exchange, or since the move if the last two ticks show one. Between
// regular turns: when the demand moved and the last exchange was a regular
// one (at most one early exchange per interval), and once more a tick after
// reporting a move that was still unfolding (its last tick alone: the two
// ticks after it measure it better).
func (e *Exchanger) observe(k string, r Rule, c claimed, due bool) (demand float64, kind turnKind) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.lookup(k, r)
	if t.due.IsZero() {
		t.due = e.next(e.clock())
	}
	t.owner = true
	t.read(c.now, c.asked)
	m := t.recent(r, tick(e.topo))
	refine := t.refine && m.known
	if !due && !refine && (!m.moved || t.early) {
		if !t.short || t.retries >= maxShortRetries {
			return 0, turnRead
		}
		// Short of its share: exchange again, reporting the same demand
		// (nothing new measured; the schedule stays).
		t.retries++
		return t.reported, turnRetry
	}
	t.retries = 0
	switch {
	case refine:
		demand = m.two
	case m.moved:
		demand = m.since()
	default:
		demand = t.sinceLast(r, c)
	}
	if c.asked == t.asked && t.measured && c.quota == 0 {
		t.idle++
	} else {
		t.idle = 0
	}
	t.asked, t.at, t.measured, t.hit = c.asked, c.now, true, false
	t.reported, t.early, t.refine = demand, !due, m.unfolding && !refine
	if !due && !refine {
		// An early exchange moves the schedule: the next regular one is an
		// interval after it, so early exchanges add no WAN traffic of
		// their own. A refinement is part of the report before it.
		t.due = e.next(e.clock())
	}
	if m.moved || refine {
		return demand, turnMoved
	}
	return demand, turnRegular
}

// turnKind is what a turn of a key does.
type turnKind int

const (
	// turnRead reads the count only.
	turnRead turnKind = iota
	// turnRegular exchanges the demand since the last exchange.
	turnRegular
	// turnMoved exchanges a demand that moved (early or on a regular turn).
	turnMoved
	// turnRetry exchanges again, the demand unchanged, because the last
	// exchange left the region short of its share (see exchange).
	turnRetry
)

// lookup returns k's entry, adding it under r if missing. e.mu is held.
func (e *Exchanger) lookup(k string, r Rule) *tracked {
	t, ok := e.keys[k]
	if !ok {
		t = &tracked{rule: r, reported: math.Inf(1)}
		e.keys[k] = t
	}
	return t
}
