package idempotency

import (
	"strings"
	"testing"
)

func TestReplayHeaders(t *testing.T) {
	allow := func(name string) bool {
		switch name {
		case "location", "etag", "set-cookie", "authorization", "date", "ratelimit", "x-ratelimit-limit", "connection", "x-custom":
			return true // an over-broad allow-list: the never list must still win
		}
		return false
	}
	in := []Header{
		{Name: "Content-Type", Value: "application/json"},
		{Name: "Location", Value: "/orders/1"},
		{Name: "Set-Cookie", Value: "session=secret"},
		{Name: "Authorization", Value: "Bearer x"},
		{Name: "Date", Value: "Mon, 01 Jan 2024 00:00:00 GMT"},
		{Name: "RateLimit", Value: `"a";r=1`},
		{Name: "X-RateLimit-Limit", Value: "10"},
		{Name: "Connection", Value: "close"},
		{Name: ":status", Value: "201"},
		{Name: "x-envoy-upstream-service-time", Value: "3"},
		{Name: "X-Unlisted", Value: "dropped"},
		{Name: "x-custom", Value: "a\r\nInjected: yes"},
		{Name: "bad name", Value: "x"},
		{Name: "ETag", Value: `"v1"`},
		{Name: "x-custom", Value: "kept"},
	}
	got := ReplayHeaders(in, allow)
	want := []Header{
		{Name: "content-type", Value: "application/json"},
		{Name: "location", Value: "/orders/1"},
		{Name: "etag", Value: `"v1"`},
		{Name: "x-custom", Value: "kept"},
	}
	if len(got) != len(want) {
		t.Fatalf("ReplayHeaders = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("ReplayHeaders[%d] = %v, want %v", i, got[i], want[i])
		}
	}
	if n := len(ReplayHeaders(make([]Header, 100), func(string) bool { return true })); n != 0 {
		t.Fatalf("empty names kept: %d", n)
	}
	many := make([]Header, 100)
	for i := range many {
		many[i] = Header{Name: "x-h", Value: "v"}
	}
	if n := len(ReplayHeaders(many, func(string) bool { return true })); n != MaxReplayHeaders {
		t.Fatalf("kept %d headers, want the cap %d", n, MaxReplayHeaders)
	}
	if got := ReplayHeaders([]Header{{Name: "content-encoding", Value: "gzip"}}, nil); len(got) != 1 {
		t.Fatal("content-encoding dropped with a nil allow-list")
	}
}

// FuzzReplayHeaders: whatever an upstream sends and the allow-list says, a
// kept header is never on the never-replay list, has a valid name and a
// value without CR, LF or NUL, and was in the input.
func FuzzReplayHeaders(f *testing.F) {
	f.Add("Set-Cookie", "a=b", "location", "/x", true)
	f.Add("x-ok", "v\r\nx: y", ":status", "200", true)
	f.Add("RateLimit-Policy", `"a";q=1`, "content-type", "text/plain", false)
	f.Fuzz(func(t *testing.T, n1, v1, n2, v2 string, allowAll bool) {
		in := []Header{{Name: n1, Value: v1}, {Name: n2, Value: v2}}
		allow := func(string) bool { return allowAll }
		for _, h := range ReplayHeaders(in, allow) {
			if NeverReplayed(h.Name) {
				t.Fatalf("kept never-replayed %q", h.Name)
			}
			if !ValidHeaderName(h.Name) || h.Name != strings.ToLower(h.Name) {
				t.Fatalf("kept bad name %q", h.Name)
			}
			if strings.ContainsAny(h.Value, "\r\n\x00") {
				t.Fatalf("kept value %q with CR, LF or NUL", h.Value)
			}
			found := false
			for _, x := range in {
				found = found || (strings.EqualFold(x.Name, h.Name) && x.Value == h.Value)
			}
			if !found {
				t.Fatalf("kept %v, not in the input", h)
			}
		}
	})
}
