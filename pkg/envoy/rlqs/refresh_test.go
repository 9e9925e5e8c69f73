package rlqs

import (
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit/quota"
)

// Every report refreshes the bucket's assignment, even one that arrives a
// little under an interval after the last: Envoy re-opens a stream that
// ended only at its next report, up to an interval later, and its new
// stream's first assignment must arrive before the old one expires
// (assignment_time_to_live, two intervals and a second). A report that
// came early and found the assignment "not due" left it to the next tick,
// up to a second older, and a stream that ended then left its Envoy an
// assignment that expired as the new stream's first one was on its way:
// expired_assignment_behavior (ALLOW_ALL) meanwhile, and a token bucket
// installed over it starts full (one burst on top of the share).
func TestEveryReportRefreshesTheAssignment(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{}, nil) // no ticks: only reports answer
	c := h.open(t)
	send(t, c, "quota", usage(acme, 1, 0))
	first := tokensOf(recv(t, c)["acme"])
	for _, early := range []time.Duration{0, 10 * time.Millisecond, 500 * time.Millisecond} {
		h.clock.Add(quota.ReportInterval - early)
		// A new bucket in the same report is always answered, so the
		// message shows whether acme was refreshed with it.
		other := map[string]string{"tenant": "nobody-" + early.String()}
		send(t, c, "", usage(acme, 5, 0), usage(other, 1, 0))
		got := recv(t, c)
		if got["acme"] == nil {
			t.Errorf("a report %s before a full interval since the last assignment: acme not refreshed", early)
			continue
		}
		if g := tokensOf(got["acme"]); g != first {
			t.Errorf("refresh %s early: %+v, want the same assignment %+v", early, g, first)
		}
	}
}

// A tick refreshes an assignment that is a tick short of an interval old,
// for the same reason: a stream whose last assignment was sent by a tick
// between two reports would otherwise wait for the tick after a full
// interval, up to a second more, and its report at that moment may be the
// one that never arrives because the stream ended.
func TestATickRefreshesTheAssignmentBeforeAFullInterval(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{Tick: 10 * time.Millisecond}, nil)
	c := h.open(t)
	send(t, c, "quota", usage(acme, 1, 0))
	first := tokensOf(recv(t, c)["acme"])
	h.clock.Add(quota.ReportInterval - 5*time.Millisecond) // the ticks' now: under one interval by half a tick
	got := make(chan tokens, 1)
	go func() {
		resp, err := c.Recv()
		if err != nil {
			return
		}
		for _, a := range resp.GetBucketAction() {
			got <- tokensOf(a.GetQuotaAssignmentAction().GetRateLimitStrategy())
		}
	}()
	select {
	case g := <-got:
		if g != first {
			t.Errorf("refresh: %+v, want the same assignment %+v", g, first)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("no refresh from the ticks of the following 2 s, with the assignment half a tick short of an interval old")
	}
}
