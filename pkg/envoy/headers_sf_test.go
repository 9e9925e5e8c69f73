package envoy

import (
	"math"
	"strings"
	"testing"
	"time"
)

// TestRateLimitHeadersIntegersStayWithinStructuredFieldRange checks that a
// limit too large for an sf-integer (RFC 9651 §3.3.1: at most 15 digits)
// still yields well-formed fields: a recipient must ignore a malformed
// RateLimit field entirely, which would hide every limit it lists.
func TestRateLimitHeadersIntegersStayWithinStructuredFieldRange(t *testing.T) {
	t.Parallel()
	qs := []Quota{{Name: "huge", Quota: 1e16, Window: time.Minute, Remaining: math.MaxInt64, Reset: time.Second}}
	hs := rateLimitHeaders(qs, false, 0)
	want := map[string]string{
		HeaderRateLimitPolicy: `"huge";q=999999999999999;w=60`,
		HeaderRateLimit:       `"huge";r=999999999999999;t=1`,
	}
	if len(hs) != len(want) {
		t.Fatalf("headers %v, want %v", hs, want)
	}
	for _, h := range hs {
		if want[h.GetKey()] != h.GetValue() {
			t.Errorf("%s = %q, want %q", h.GetKey(), h.GetValue(), want[h.GetKey()])
		}
		for _, item := range strings.Split(h.GetValue(), ", ") {
			for _, param := range strings.Split(item, ";")[1:] {
				if _, v, _ := strings.Cut(param, "="); len(v) > 15 {
					t.Errorf("%s: parameter %s has more than 15 digits", h.GetKey(), param)
				}
			}
		}
	}
}
