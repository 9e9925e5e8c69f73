package ratelimit

import (
	"errors"
	"strings"
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
		{Requests: 1, Period: time.Second, Consistency: Exact},
		{Requests: 1, Period: time.Second, Consistency: Allotment},
		{Algorithm: FixedWindow, Requests: 1, Period: time.Second, Consistency: Allotment},
		{Algorithm: SlidingWindow, Requests: 1, Period: time.Second, Consistency: Allotment},
		{Algorithm: SlidingLog, Requests: 1, Period: time.Second, Consistency: Allotment},
		{Algorithm: SlidingLog, Requests: 1, Period: time.Second, Consistency: Exact},
		{Requests: 1, Period: time.Second, Consistency: "eventual"},
		{Requests: 1, Period: time.Second, Consistency: "Exact"},
	} {
		if got, want := l.valid(), l.Validate() == nil; got != want {
			t.Errorf("%+v: valid() = %v, Validate() = %v", l, got, l.Validate())
		}
	}
}

// TestValidateConsistency: an unknown mode and allotment on sliding_log are
// rejected with a message that says why; the others pass.
func TestValidateConsistency(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		l    Limit
		want string // "" when valid
	}{
		{Limit{Requests: 1, Period: time.Second, Consistency: Allotment}, ""},
		{Limit{Algorithm: SlidingWindow, Requests: 1, Period: time.Second, Consistency: Allotment}, ""},
		{Limit{Algorithm: FixedWindow, Requests: 1, Period: time.Second, Consistency: Exact}, ""},
		{Limit{Requests: 1, Period: time.Second, Consistency: "eventual"}, `unknown consistency "eventual"`},
		{Limit{Algorithm: SlidingLog, Requests: 1, Period: time.Second, Consistency: Allotment}, "sliding_log cannot use allotment"},
	} {
		err := tc.l.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v, want nil", tc.l, err)
		case tc.want != "" && (err == nil || !errors.Is(err, ErrInvalidLimit) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: %v, want ErrInvalidLimit with %q", tc.l, err, tc.want)
		}
	}
	if Consistency("").OrDefault() != Exact || Allotment.OrDefault() != Allotment {
		t.Error("OrDefault: the empty mode must be Exact")
	}
}
