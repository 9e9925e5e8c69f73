package region

import (
	"context"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/redisscript"
	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/internal/testclock"
)

// What two ticks of readings say of the demand, against the demand last
// reported (hits per 1 s window; ticks of 25 ms).
func TestRecentDemand(t *testing.T) {
	t0 := time.UnixMilli(1_800_000_000_000)
	tk := 25 * time.Millisecond
	cases := []struct {
		name     string
		reported float64
		ticks    [2]int64 // hits asked in the older and the last tick
		want     recent
	}{
		{"steady", 300, [2]int64{7, 8}, recent{known: true, two: 300, last: 320}},
		{"noise within three deviations", 300, [2]int64{11, 12}, recent{known: true, two: 460, last: 480}},
		{"one burst tick is not a move", 300, [2]int64{7, 20}, recent{known: true, two: 540, last: 800}},
		{"tripled", 300, [2]int64{23, 22}, recent{known: true, two: 900, last: 880, moved: true}},
		{"a third", 900, [2]int64{7, 8}, recent{known: true, two: 300, last: 320, moved: true}},
		// One hit more in the last tick reads as a move still unfolding:
		// it is reported from the last tick, then refined a tick later (one
		// more exchange), rather than risk a blend at small counts.
		{"tripled, one hit more in the last tick", 300, [2]int64{22, 23}, recent{known: true, two: 900, last: 920, moved: true, unfolding: true}},
		{"tripled within the older tick", 300, [2]int64{15, 23}, recent{known: true, two: 760, last: 920, moved: true, unfolding: true}},
		{"from idle", 0, [2]int64{10, 12}, recent{known: true, two: 440, last: 480, moved: true, unfolding: true}},
		{"to idle", 900, [2]int64{0, 0}, recent{known: true, two: 0, last: 0, moved: true}},
		{"not measured yet", math.Inf(1), [2]int64{22, 23}, recent{known: true, two: 900, last: 920}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := &tracked{reported: c.reported}
			tr.read(t0, 1000)
			tr.read(t0.Add(tk), 1000+c.ticks[0])
			tr.read(t0.Add(2*tk), 1000+c.ticks[0]+c.ticks[1])
			got := tr.recent(simRule, tk)
			got.two, got.last = math.Round(got.two), math.Round(got.last)
			if got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

// Fewer than three readings, a count that began again, or readings closer
// than a tick say nothing.
func TestRecentDemandNeedsTwoTicks(t *testing.T) {
	t0 := time.UnixMilli(1_800_000_000_000)
	tk := 25 * time.Millisecond
	tr := &tracked{reported: 300}
	tr.read(t0, 100)
	tr.read(t0.Add(tk), 200)
	if got := tr.recent(simRule, tk); got.known {
		t.Errorf("two readings: %+v, want nothing known", got)
	}
	tr.read(t0.Add(2*tk), 10) // the key's hash expired and began again
	if got := tr.recent(simRule, tk); got.known || len(tr.readings) != 1 {
		t.Errorf("after the count went down: %+v with %d readings, want nothing known from one", got, len(tr.readings))
	}
	tr.read(t0.Add(2*tk+time.Millisecond), 20)
	tr.read(t0.Add(2*tk+2*time.Millisecond), 30)
	if got := tr.recent(simRule, tk); got.known {
		t.Errorf("readings 1 ms apart: %+v, want nothing known", got)
	}
}

// calls counts the commands sent through a Processor.
type calls struct {
	redisscript.Processor
	n atomic.Int64
}

func (c *calls) Process(ctx context.Context, cmd redis.Cmder) error {
	c.n.Add(1)
	return c.Processor.Process(ctx, cmd)
}

// Between regular exchanges only the key's lease holder reads the region's
// count: the other replica sends one claim per interval, as before ticks.
func TestOnlyTheLeaseHolderReadsBetweenExchanges(t *testing.T) {
	ctx := context.Background()
	clock := testclock.New(time.UnixMilli(1_800_000_000_000))
	c := redistest.Standalone(t).Client()
	_, g := newTestPair(t, c, clock, "eu")
	var sent []*calls
	var replicas []*Exchanger
	for _, owner := range []string{"replica-1", "replica-2"} {
		counted := &calls{Processor: c}
		l, err := NewLocal(counted, "teu")
		if err != nil {
			t.Fatal(err)
		}
		l.now = clock.Now
		ex, err := NewExchanger(testTopo, l, g, owner)
		if err != nil {
			t.Fatal(err)
		}
		ex.now = clock.Now
		ex.Track("k", simRule) // as its decisions would
		sent, replicas = append(sent, counted), append(replicas, ex)
	}
	const intervals = 10
	for range intervals * ticksPerInterval {
		for _, ex := range replicas {
			if _, _, err := ex.Tick(ctx, "k", simRule); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(tick(testTopo))
	}
	holder, other := sent[0].n.Load(), sent[1].n.Load()
	t.Logf("commands to the region's Redis in %d intervals: lease holder %d, other replica %d", intervals, holder, other)
	if other != intervals {
		t.Errorf("the replica without the lease sent %d commands in %d intervals, want one claim per interval", other, intervals)
	}
	if holder < intervals*ticksPerInterval {
		t.Errorf("the lease holder sent %d commands in %d intervals, want a claim every tick at least", holder, intervals)
	}
}
