package breaker_test

import (
	"errors"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/breaker"
)

var (
	t0      = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	errDown = errors.New("connection refused")
)

func newBreaker(t *testing.T, threshold int, coolDown time.Duration) *breaker.Breaker {
	t.Helper()
	b, err := breaker.New(threshold, coolDown)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fail runs one acquired call that fails at now and returns Failure's answer.
func fail(t *testing.T, b *breaker.Breaker, now time.Time) bool {
	t.Helper()
	if !b.Acquire(now) {
		t.Fatalf("Acquire(%s) = false, want a call to pass", now.Sub(t0))
	}
	return b.Failure(now, errDown)
}

func TestNewRejectsBadSettings(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		threshold int
		coolDown  time.Duration
	}{{0, time.Second}, {-1, time.Second}, {1, 0}, {1, -time.Second}} {
		if _, err := breaker.New(c.threshold, c.coolDown); !errors.Is(err, breaker.ErrInvalid) {
			t.Errorf("New(%d, %s) error = %v, want ErrInvalid", c.threshold, c.coolDown, err)
		}
	}
}

// TestOpensAfterThresholdConsecutiveFailures: threshold-1 failures keep it
// closed; the threshold-th opens it and calls are refused until the
// cool-down ends.
func TestOpensAfterThresholdConsecutiveFailures(t *testing.T) {
	t.Parallel()
	b := newBreaker(t, 3, time.Second)
	for i := range 2 {
		if fail(t, b, t0) {
			t.Fatalf("open after %d failures, threshold 3", i+1)
		}
	}
	if !fail(t, b, t0) {
		t.Fatal("closed after 3 failures, threshold 3")
	}
	st := b.State()
	if !st.Open || st.Failures != 3 || !errors.Is(st.LastErr, errDown) {
		t.Fatalf("State = %+v, want open, 3 failures, errDown", st)
	}
	for _, at := range []time.Duration{0, 500 * time.Millisecond, time.Second - 1} {
		if b.Acquire(t0.Add(at)) {
			t.Fatalf("Acquire at +%s passed during the cool-down", at)
		}
		if !b.CoolingDown(t0.Add(at)) {
			t.Fatalf("CoolingDown at +%s = false", at)
		}
	}
	if b.CoolingDown(t0.Add(time.Second)) {
		t.Fatal("CoolingDown at the end of the cool-down = true")
	}
}

// TestSuccessResetsTheCount: failures must be consecutive.
func TestSuccessResetsTheCount(t *testing.T) {
	t.Parallel()
	b := newBreaker(t, 2, time.Second)
	fail(t, b, t0)
	b.Acquire(t0)
	b.Success()
	if fail(t, b, t0) {
		t.Fatal("open after failure, success, failure with threshold 2")
	}
}

// TestReleaseKeepsTheCount: a neutral outcome neither resets nor adds.
func TestReleaseKeepsTheCount(t *testing.T) {
	t.Parallel()
	b := newBreaker(t, 2, time.Second)
	fail(t, b, t0)
	b.Acquire(t0)
	b.Release()
	if st := b.State(); st.Failures != 1 || st.Open {
		t.Fatalf("State after Release = %+v, want 1 failure, closed", st)
	}
	if !fail(t, b, t0) {
		t.Fatal("closed after 2 failures around a Release, threshold 2")
	}
}

// TestOneProbeAfterCoolDown: once the cool-down is over exactly one caller
// gets through; its success closes the circuit.
func TestOneProbeAfterCoolDown(t *testing.T) {
	t.Parallel()
	b := newBreaker(t, 1, time.Second)
	fail(t, b, t0)
	later := t0.Add(time.Second)
	if !b.Acquire(later) {
		t.Fatal("no probe after the cool-down")
	}
	if b.Acquire(later) {
		t.Fatal("a second caller passed while the probe is in flight")
	}
	b.Success()
	if st := b.State(); st.Open || st.Failures != 0 || st.LastErr != nil {
		t.Fatalf("State after a successful probe = %+v, want closed and clean", st)
	}
	for range 2 {
		if !b.Acquire(later) {
			t.Fatal("closed circuit refused calls")
		}
	}
}

// TestFailedProbeReopens: a failed probe starts a new cool-down from its
// own instant, whatever the threshold.
func TestFailedProbeReopens(t *testing.T) {
	t.Parallel()
	b := newBreaker(t, 2, time.Second)
	fail(t, b, t0)
	fail(t, b, t0)
	probeAt := t0.Add(3 * time.Second)
	if !fail(t, b, probeAt) {
		t.Fatal("closed after a failed probe")
	}
	if b.Acquire(probeAt.Add(time.Second - 1)) {
		t.Fatal("call passed before the new cool-down ended")
	}
	if !b.Acquire(probeAt.Add(time.Second)) {
		t.Fatal("no probe after the new cool-down")
	}
}

// TestReleasedProbeFreesTheSlot: a probe whose caller went away lets the
// next caller probe, and the circuit stays open meanwhile.
func TestReleasedProbeFreesTheSlot(t *testing.T) {
	t.Parallel()
	b := newBreaker(t, 1, time.Second)
	fail(t, b, t0)
	later := t0.Add(time.Second)
	b.Acquire(later)
	b.Release()
	if !b.State().Open {
		t.Fatal("a released probe closed the circuit")
	}
	if !b.Acquire(later) {
		t.Fatal("the probe slot stayed taken after Release")
	}
}
