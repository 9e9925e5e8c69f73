package lockouttest

import (
	"context"
	"sync"
	"testing"
	"time"
)

// testConcurrent: goroutines trip one key at once (responses of requests
// admitted together, on any replica); exactly one trip counts, and every
// caller learns of the same single lockout.
func testConcurrent(t *testing.T, h Harness) {
	const workers = 16
	s, key := h.New(t), Key(t)
	type reply struct {
		d     time.Duration
		trips int64
		err   error
	}
	replies := make(chan reply, workers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			d, n, err := s.Trip(context.Background(), key, hour)
			replies <- reply{d, n, err}
		}()
	}
	close(start)
	wg.Wait()
	close(replies)
	full := 0
	for r := range replies {
		if r.err != nil || r.trips != 1 || r.d <= time.Hour-time.Minute || r.d > time.Hour {
			t.Fatalf("concurrent Trip = %v, %d, %v; want 1 trip locking up to 1h", r.d, r.trips, r.err)
		}
		if r.d == time.Hour {
			full++
		}
	}
	if full < 1 {
		t.Fatal("no Trip reported the full first lockout: none counted it")
	}
	locked(t, s, key, time.Hour-time.Minute, time.Hour)
}
