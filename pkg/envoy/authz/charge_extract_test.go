package authz

import (
	"strings"
	"testing"
)

func TestParseCost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"300", 300, true}, {" 42 ", 42, true}, {"0", 0, true}, {"2.1", 3, true},
		{"-1", 0, false}, {"-0.5", 0, false}, {"", 0, false}, {"abc", 0, false}, {"NaN", 0, false}, {"1e300", 0, false},
	}
	for _, tt := range tests {
		if got, ok := parseCost(tt.in); got != tt.want || ok != tt.ok {
			t.Errorf("parseCost(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestJSONCostAndKey(t *testing.T) {
	t.Parallel()
	doc := []byte(`{"usage":{"total_tokens":300,"as_string":"12","frac":1.5,"neg":-3},"username":"alice","id":12345678901234567890,"list":[1]}`)
	costs := map[string]struct {
		want int64
		ok   bool
	}{
		"usage.total_tokens": {300, true}, "usage.as_string": {12, true}, "usage.frac": {2, true},
		"usage.neg": {0, false}, "usage": {0, false}, "usage.missing": {0, false}, "list.0": {0, false}, "username.x": {0, false},
	}
	for path, w := range costs {
		if got, ok := jsonCost(doc, path); got != w.want || ok != w.ok {
			t.Errorf("jsonCost(%q) = %d, %v; want %d, %v", path, got, ok, w.want, w.ok)
		}
	}
	for path, want := range map[string]string{"username": "alice", "id": "12345678901234567890", "usage": "", "nope": ""} {
		if got := jsonKey(doc, path); got != want {
			t.Errorf("jsonKey(%q) = %q, want %q", path, got, want)
		}
	}
	for _, bad := range []string{``, `{`, `[1,2]`, "\xff\xfe", `"x"`} {
		if _, ok := jsonCost([]byte(bad), "a"); ok {
			t.Errorf("jsonCost(%q) found a cost", bad)
		}
		if k := jsonKey([]byte(bad), "a"); k != "" {
			t.Errorf("jsonKey(%q) = %q", bad, k)
		}
	}
}

func TestFormKey(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		"username=alice&password=x": "alice", "password=x&username=b%20c": "b c", "password=x": "", "%zz": "", "": "",
	} {
		if got := formKey([]byte(body), "username"); got != want {
			t.Errorf("formKey(%q) = %q, want %q", body, got, want)
		}
	}
}

// TestSSECostLastEvent feeds streams in every split (byte by byte too): the
// last event whose data has the field wins, whatever the chunking.
func TestSSECostLastEvent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, stream string
		want         int64
		found        bool
	}{
		{"usage in the last event before [DONE]",
			"data: {\"choices\":[]}\n\ndata: {\"usage\":{\"total_tokens\":7}}\n\ndata: {\"usage\":{\"total_tokens\":300}}\n\ndata: [DONE]\n\n", 300, true},
		{"CRLF and multi-line data", "event: x\r\ndata: {\"usage\":\r\ndata: {\"total_tokens\": 12}}\r\n\r\n", 12, true},
		{"last event without a blank line", "data: {\"usage\":{\"total_tokens\":1}}\n\ndata: {\"usage\":{\"total_tokens\":2}}", 2, true},
		{"no usage at all", "data: {\"a\":1}\n\n: comment\n\n", 0, false},
		{"not JSON", "data: hello\n\n", 0, false},
		{"data without space", "data:{\"usage\":{\"total_tokens\":5}}\n\n", 5, true},
	}
	for _, tt := range tests {
		for _, size := range []int{1, 3, 7, len(tt.stream)} {
			s := &sseCost{path: "usage.total_tokens"}
			for p := tt.stream; p != ""; {
				n := min(size, len(p))
				s.write([]byte(p[:n]))
				p = p[n:]
			}
			s.end()
			if s.cost != tt.want || s.found != tt.found {
				t.Errorf("%s (chunks of %d): cost %d found %v; want %d %v", tt.name, size, s.cost, s.found, tt.want, tt.found)
			}
		}
	}
}

// TestSSECostBounded: an event of twice 64 KiB is read as it arrives, its
// cost found, without the scan keeping it; the events after it count too.
func TestSSECostBounded(t *testing.T) {
	t.Parallel()
	s := &sseCost{path: "usage.total_tokens"}
	huge := "data: {\"pad\":\"" + strings.Repeat("x", 128<<10) + "\",\"usage\":{\"total_tokens\":9}}\n\n"
	for i := 0; i < len(huge); i += 4096 {
		s.write([]byte(huge[i:min(i+4096, len(huge))]))
		if kept := cap(s.scan.tok) + cap(s.scan.stack) + cap(s.name); kept > 256 {
			t.Fatalf("kept %d bytes of one event", kept)
		}
	}
	if !s.found || s.cost != 9 {
		t.Errorf("an event past 64 KiB: cost %d found %v, want 9", s.cost, s.found)
	}
	s.write([]byte("data: {\"usage\":{\"total_tokens\":4}}\n\n"))
	s.end()
	if !s.found || s.cost != 4 {
		t.Errorf("after the large event: cost %d found %v, want 4", s.cost, s.found)
	}
}

func TestIsEventStream(t *testing.T) {
	t.Parallel()
	for ct, want := range map[string]bool{"text/event-stream": true, "Text/Event-Stream; charset=utf-8": true, "application/json": false, "": false} {
		if isEventStream(ct) != want {
			t.Errorf("isEventStream(%q) = %v", ct, !want)
		}
	}
}
