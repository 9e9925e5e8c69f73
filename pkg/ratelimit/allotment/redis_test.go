package allotment

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/redisstore"
)

// The two-process test's parameters. Each round is a fresh key with a limit
// of roundLimit per hour, so a round sits in one window (rounds that cross a
// window edge are not counted) and only the limit itself can stop the
// callers: both processes hammer it for roundTime with callers goroutines
// each, and the test checks what the two admitted together. A last round
// runs a fixed_window of streamLimit per streamPeriod for streamTime, so
// slices lapse at window ends in real time: every window is checked. Its
// odd windows see little demand (quietCalls per caller), which leaves
// slices half used at their end, and its even windows more than the limit:
// a token that outlived its window would push an even window over.
const (
	streamLimit  = 200
	streamPeriod = 100 * time.Millisecond
	streamTime   = time.Second
	quietCalls   = 4

	childEnv   = "ALLOTMENT_TEST_CHILD" // JSON plan; set in the child process only
	rounds     = 8
	roundTime  = 300 * time.Millisecond
	roundLimit = 2000
	callers    = 8
)

// plan is what the parent tells the child: where Redis is, which keys, and
// when each round starts (both processes read the same wall clock).
type plan struct {
	Addr  string
	Run   string
	Start time.Time
}

func (p plan) rounds() []round {
	var out []round
	for i, l := range []ratelimit.Limit{
		{Algorithm: ratelimit.GCRA, Requests: roundLimit, Period: time.Hour},
		{Algorithm: ratelimit.FixedWindow, Requests: roundLimit, Period: time.Hour},
		{Algorithm: ratelimit.SlidingWindow, Requests: roundLimit, Period: time.Hour},
	} {
		l.Consistency = ratelimit.Allotment
		for r := range rounds {
			k := i*rounds + r
			out = append(out, round{Key: fmt.Sprintf("%s|%s|%d", p.Run, l.Algorithm, r), Limit: l,
				From: p.Start.Add(time.Duration(k) * roundTime), To: p.Start.Add(time.Duration(k+1)*roundTime - 20*time.Millisecond)})
		}
	}
	from := p.Start.Add(time.Duration(len(out)) * roundTime)
	return append(out, round{Key: p.Run + "|stream", From: from, To: from.Add(streamTime),
		Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Requests: streamLimit, Period: streamPeriod, Consistency: ratelimit.Allotment}})
}

// stream reports whether r is the real-time round, checked per window.
func (r round) stream() bool { return r.Limit.Period < time.Hour }

// outcome is one process's result of one round: its admissions, -1 when an
// hour round crossed a window edge, and for the stream round the
// admissions of each window (by index) that surely fell in it: decided
// between two readings of the clock in the same window.
type outcome struct {
	Admitted int64
	// Refused counts the refusals: a round without any never reached its
	// limit (a loaded machine played it slower than its limit's pace), so
	// it says nothing of under-admission.
	Refused int64
	Sure    map[int64]int64
}

type round struct {
	Key      string
	Limit    ratelimit.Limit
	From, To time.Time
}

// TestTwoProcessesOneRedis: two processes, each with its own allotment store
// over its own Redis store on one Redis, concurrent callers in both, one
// limit reached per round: together they never admit more than the limit
// (for gcra, more than the burst plus what the rate refilled during the
// round), and never fewer than the limit minus the documented bound.
func TestTwoProcessesOneRedis(t *testing.T) {
	if raw := os.Getenv(childEnv); raw != "" {
		runChild(t, raw)
		return
	}
	srv := redistest.Standalone(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	p := plan{Addr: srv.Addr, Run: "two-proc-" + hex.EncodeToString(b), Start: time.Now().Add(time.Second)}
	raw, _ := json.Marshal(p)
	child := exec.Command(os.Args[0], "-test.run=^TestTwoProcessesOneRedis$", "-test.count=1", "-test.v")
	child.Env = append(os.Environ(), childEnv+"="+string(raw))
	var out bytes.Buffer
	child.Stdout, child.Stderr = &out, &out
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	mineAll := play(t, p)
	if err := child.Wait(); err != nil {
		t.Fatalf("child: %v\n%s", err, out.String())
	}
	theirsAll := childResult(t, out.String())
	last := len(p.rounds()) - 1
	if len(mineAll) != last+1 || len(theirsAll) != last+1 {
		t.Fatalf("outcomes of %d and %d rounds, want %d", len(mineAll), len(theirsAll), last+1)
	}
	checkStream(t, mineAll[last], theirsAll[last])
	mine, theirs := admitted(mineAll[:last]), admitted(theirsAll[:last])
	saturated := 0
	maxN := (&Store{fraction: DefaultMaxFraction}).maxSlice(p.rounds()[0].Limit)
	bound := 2 * 3 * maxN / 2 // two replicas, each one slice plus one being leased
	shared := map[ratelimit.Algorithm]int{}
	for i, r := range p.rounds()[:len(mine)] {
		if mine[i] < 0 || theirs[i] < 0 {
			continue // the round crossed a window edge
		}
		got := mine[i] + theirs[i]
		ceiling := r.Limit.Requests
		if r.Limit.Algorithm == ratelimit.GCRA { // refilled during the round
			ceiling += int64(r.To.Sub(r.From)/emission(r.Limit)) + 1
		}
		floor := r.Limit.Requests - bound
		if mineAll[i].Refused+theirsAll[i].Refused == 0 {
			floor = 0 // never refused: the round ended before its limit was reached
		} else {
			saturated++
		}
		if got > ceiling || got < floor {
			t.Errorf("%s round %d: admitted %d (%d here, %d in the child), want %d..%d",
				r.Limit.Algorithm, i%rounds, got, mine[i], theirs[i], floor, ceiling)
		}
		if mine[i] > 0 && theirs[i] > 0 {
			shared[r.Limit.Algorithm]++
		}
		t.Logf("%s round %d: admitted %d + %d", r.Limit.Algorithm, i%rounds, mine[i], theirs[i])
	}
	// Under-admission is judged only in rounds that reached their limit; a
	// machine so loaded that none did has not tested it.
	if saturated == 0 {
		t.Errorf("no round reached its limit of %d in %s: under-admission untested", roundLimit, roundTime)
	}
	// A process that starts a round late may find the budget gone; over the
	// rounds both must have admitted together, or nothing was shared.
	for _, alg := range leasable {
		if shared[alg] == 0 {
			t.Errorf("%s: in no round did both processes admit: the limit was never shared", alg)
		}
	}
}

// runChild plays the plan and prints its admissions for the parent.
func runChild(t *testing.T, raw string) {
	var p plan
	if err := json.Unmarshal([]byte(raw), &p); err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(play(t, p))
	fmt.Printf("\nRESULT %s\n", got)
}

// checkStream fails when the two processes together admitted more than the
// limit in any window of the stream round.
func checkStream(t *testing.T, a, b outcome) {
	t.Helper()
	windows, total := 0, int64(0)
	for w := range a.Sure {
		if n := a.Sure[w] + b.Sure[w]; n > streamLimit {
			t.Errorf("stream window %d: admitted %d (%d + %d), over the limit %d", w, n, a.Sure[w], b.Sure[w], streamLimit)
		}
	}
	for w, n := range b.Sure {
		if _, ok := a.Sure[w]; !ok && n > streamLimit {
			t.Errorf("stream window %d: admitted %d in the child alone, over the limit %d", w, n, streamLimit)
		}
		windows++
		total += n
	}
	t.Logf("stream: %d+%d admitted in %d windows of %v (limit %d each)", a.Admitted, b.Admitted, windows, streamPeriod, streamLimit)
	if a.Admitted == 0 || b.Admitted == 0 || total == 0 {
		t.Errorf("stream: admitted %d and %d: both processes must take part", a.Admitted, b.Admitted)
	}
}

func admitted(os []outcome) []int64 {
	out := make([]int64, len(os))
	for i, o := range os {
		out[i] = o.Admitted
	}
	return out
}

func childResult(t *testing.T, out string) []outcome {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "RESULT "); ok {
			var got []outcome
			if err := json.Unmarshal([]byte(rest), &got); err != nil {
				t.Fatal(err)
			}
			return got
		}
	}
	t.Fatalf("the child printed no result:\n%s", out)
	return nil
}

// play runs every round of p in this process and returns their outcomes.
func play(t *testing.T, p plan) []outcome {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: p.Addr, PoolSize: 2 * callers})
	t.Cleanup(func() { _ = client.Close() })
	rs, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(rs, Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	var out []outcome
	for _, r := range p.rounds() {
		time.Sleep(time.Until(r.From)) // both processes start each round together
		o := playRound(t, s, r)
		if !r.stream() && r.From.Truncate(r.Limit.Period) != r.To.Truncate(r.Limit.Period) {
			o.Admitted = -1
		}
		out = append(out, o)
	}
	return out
}

func playRound(t *testing.T, s *Store, r round) outcome {
	var admitted, refused atomic.Int64
	var mu sync.Mutex
	sure := map[int64]int64{}
	var wg sync.WaitGroup
	ctx := context.Background()
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			calls, window := 0, int64(-1)
			for time.Now().Before(r.To) {
				before := time.Now().UnixMicro() / r.Limit.Period.Microseconds()
				if before != window {
					calls, window = 0, before
				}
				if calls++; r.stream() && before%2 == 1 && calls > quietCalls {
					time.Sleep(time.Until(time.UnixMicro((before + 1) * r.Limit.Period.Microseconds())))
					continue
				}
				res, err := s.Allow(ctx, r.Key, r.Limit, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if !res.Allowed {
					refused.Add(1)
					continue
				}
				admitted.Add(1)
				if after := time.Now().UnixMicro() / r.Limit.Period.Microseconds(); r.stream() && after == before {
					mu.Lock()
					sure[before]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return outcome{Admitted: admitted.Load(), Refused: refused.Load(), Sure: sure}
}
