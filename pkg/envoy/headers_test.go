package envoy

import (
	"testing"
	"time"
)

func TestSFString(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"per-tenant":    `"per-tenant"`,
		`say "hi"`:      `"say \"hi\""`,
		`back\slash`:    `"back\\slash"`,
		"tab\there":     `"tab_here"`,
		"caf\u00e9":     `"caf__"`,
		"":              `""`,
		"api.route_/x*": `"api.route_/x*"`,
	} {
		if got := sfString(in); got != want {
			t.Errorf("sfString(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestRateLimitHeaders(t *testing.T) {
	t.Parallel()
	qs := []Quota{
		{Name: "a", Quota: 10, Window: 1500 * time.Millisecond, Remaining: 3, Reset: 1200 * time.Millisecond},
		{Name: "a", Quota: 10, Window: 1500 * time.Millisecond, Remaining: 3, Reset: 1200 * time.Millisecond},
		{Name: "b", Quota: 5, Window: 100 * time.Millisecond, Remaining: 0, Reset: 0},
	}
	hs := rateLimitHeaders(qs, true, 1001*time.Millisecond)
	want := map[string]string{
		HeaderRateLimitPolicy: `"a";q=10;w=2, "b";q=5;w=1`,
		HeaderRateLimit:       `"a";r=3;t=2, "b";r=0;t=0`,
		HeaderRetryAfter:      "2",
	}
	if len(hs) != len(want) {
		t.Fatalf("headers %v, want %v", hs, want)
	}
	for _, h := range hs {
		if want[h.GetKey()] != h.GetValue() {
			t.Errorf("%s = %q, want %q", h.GetKey(), h.GetValue(), want[h.GetKey()])
		}
	}
	if hs := rateLimitHeaders(nil, false, 0); len(hs) != 0 {
		t.Errorf("no quotas: headers %v, want none", hs)
	}
}
