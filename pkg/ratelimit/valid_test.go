package ratelimit

import (
	"testing"
	"time"
)

// TestValidAgreesWithValidate: valid, Apply's fast check, accepts exactly
// the limits Validate accepts.
func TestValidAgreesWithValidate(t *testing.T) {
	t.Parallel()
	for _, l := range []Limit{
		{},
		{Requests: 1, Period: time.Millisecond},
		{Algorithm: GCRA, Requests: 1, Period: time.Millisecond, Burst: 3},
		{Algorithm: SlidingLog, Requests: 5, Period: time.Hour},
		{Algorithm: SlidingLog, Requests: MaxSlidingLogRequests, Period: time.Hour},
		{Algorithm: SlidingLog, Requests: MaxSlidingLogRequests + 1, Period: time.Hour},
		{Algorithm: GCRA, Requests: MaxSlidingLogRequests + 1, Period: time.Hour},
		{Algorithm: SlidingWindow, Requests: 5, Period: time.Second},
		{Algorithm: FixedWindow, Requests: 5, Period: time.Second},
		{Algorithm: "gcrA", Requests: 5, Period: time.Second},
		{Algorithm: "token_bucket", Requests: 5, Period: time.Second},
		{Requests: 0, Period: time.Second},
		{Requests: -1, Period: time.Second},
		{Requests: 1, Period: time.Millisecond - 1},
		{Requests: 1, Period: time.Second + time.Microsecond},
		{Requests: 1, Period: -time.Second},
		{Requests: 1, Period: time.Second, Burst: -1},
	} {
		if got, want := l.valid(), l.Validate() == nil; got != want {
			t.Errorf("%+v: valid() = %v, Validate() = %v", l, got, l.Validate())
		}
	}
}
