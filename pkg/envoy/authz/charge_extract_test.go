package authz

import (
	"strings"
	"testing"

	"github.com/extauthz/extauthz/pkg/policy"
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

func TestJSONCostAndValues(t *testing.T) {
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
	for path, want := range map[string]string{"username": "alice", "id": "12345678901234567890", "usage": "", "nope": "", "usage.as_string": "12"} {
		got, err := jsonValues(doc, strings.Split(path, "."), false)
		if err != nil || strings.Join(got, ",") != want {
			t.Errorf("jsonValues(%q) = %q, %v; want %q", path, got, err, want)
		}
	}
	for _, bad := range []string{``, `{`, "\xff\xfe", `[1,2]`, `"x"`} {
		if _, ok := jsonCost([]byte(bad), "a"); ok {
			t.Errorf("jsonCost(%q) found a cost", bad)
		}
	}
	// A key is read only from a whole JSON document, as json.Unmarshal
	// reads one (trailing data, a trailing comma: not JSON).
	for _, bad := range []string{``, `{`, "\xff\xfe", `{"a":"x"} {"a":"y"}`, `{"a":"x",}`} {
		if vs, err := jsonValues([]byte(bad), []string{"a"}, false); err == nil {
			t.Errorf("jsonValues(%q) = %q, want errUnparsable", bad, vs)
		}
	}
}

// TestJSONValuesEveryReading: every value a JSON parser could bind to the
// field is found, in document order: duplicate keys (first-wins and
// last-wins parsers), case variants (Go, ASP.NET), escaped names,
// duplicated parent objects; exact matching finds only the exact name.
func TestJSONValuesEveryReading(t *testing.T) {
	t.Parallel()
	tests := []struct {
		doc, path string
		exact     bool
		want      string
	}{
		{`{"username":"a","username":"b"}`, "username", false, "a|b"},
		{`{"Username":"a","USERNAME":"b","username":"c"}`, "username", false, "a|b|c"},
		{`{"Username":"a","username":"c"}`, "username", true, "c"},
		{`{"\u0075sername":"a"}`, "username", false, "a"},
		{`{"user":{"name":"a"},"User":{"Name":"b"},"user":[{"name":"x"}]}`, "user.name", false, "a|b"},
		{`{"username":["a"],"username":{"x":"y"},"username":null,"username":true,"username":7}`, "username", false, "7"},
		{`[{"username":"a"}]`, "username", false, ""},
		{`{"pad":[[[{"username":"x"}]]],"username":"a"}`, "username", false, "a"},
	}
	for _, tt := range tests {
		got, err := jsonValues([]byte(tt.doc), strings.Split(tt.path, "."), tt.exact)
		if err != nil || strings.Join(got, "|") != tt.want {
			t.Errorf("jsonValues(%s, %q, exact %v) = %q, %v; want %q", tt.doc, tt.path, tt.exact, got, err, tt.want)
		}
	}
}

// TestFormValues: a form is read as PHP, Django, Express and Flask read it:
// a malformed pair or escape loses nothing else, ';' is data, every
// duplicate and case variant is found in order.
func TestFormValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		body  string
		exact bool
		want  string
	}{
		{"username=alice&password=x", false, "alice"},
		{"password=x&username=b%20c+d", false, "b c d"},
		{"password=x", false, ""},
		{"", false, ""},
		{"x=%zz&username=carol", false, "carol"},
		{"username=carol&x=%zz", false, "carol"},
		{"a=1;username=x&username=carol", false, "carol"},
		{"username=car%zzol", false, "car%zzol"},
		{"username=%", false, "%"},
		{"username=a&username=b", false, "a|b"},
		{"Username=a&USERNAME=b&username=c", false, "a|b|c"},
		{"Username=a&username=c", true, "c"},
		{"%75sername=a", false, "a"},
		{"+username=a&%20username=b", false, "a|b"},
		{"username", false, ""},
		{"&&username=a&&", false, "a"},
	}
	for _, tt := range tests {
		got := formValues([]byte(tt.body), fieldMatcher{name: "username", exact: tt.exact})
		if strings.Join(got, "|") != tt.want {
			t.Errorf("formValues(%q, exact %v) = %q, want %q", tt.body, tt.exact, got, tt.want)
		}
	}
}

// TestNormalize: the default steps make one account of its spellings.
func TestNormalize(t *testing.T) {
	t.Parallel()
	all := policy.DefaultNormalization
	for _, v := range []string{"carol", "Carol", "CAROL", " carol ", "carol\t", "\u3000Carol", "ｃａｒｏｌ", "ＣＡＲＯＬ"} {
		if got := normalize(v, all); got != "carol" {
			t.Errorf("normalize(%q) = %q, want carol", v, got)
		}
	}
	for in, want := range map[string]string{"Straße@Example.COM": "strasse@example.com", "ﬁle": "file", "K": "k"} {
		if got := normalize(in, all); got != want {
			t.Errorf("normalize(%q) = %q, want %q", in, got, want)
		}
	}
	if got := normalize(" Carol ", policy.Normalization{}); got != " Carol " {
		t.Errorf("no steps changed %q", got)
	}
	if got := normalize(" Carol ", policy.Normalization{Trim: true}); got != "Carol" {
		t.Errorf("trim only: %q", got)
	}
}

// TestMaskAddress: IPv6 by its prefix, IPv4 and IPv4-mapped as IPv4.
func TestMaskAddress(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ip     string
		prefix int
		want   string
	}{
		{"192.0.2.1", 64, "192.0.2.1"},
		{"::ffff:192.0.2.1", 64, "192.0.2.1"},
		{"2001:db8:1:2:3:4:5:6", 64, "2001:db8:1:2::/64"},
		{"2001:db8:1:2:ffff::1", 64, "2001:db8:1:2::/64"},
		{"2001:db8:1:2:3:4:5:6", 48, "2001:db8:1::/48"},
		{"2001:db8::1", 128, "2001:db8::1/128"},
		{"fe80::1%eth0", 64, "fe80::/64"},
		{"", 64, ""},
		{"not-an-ip", 64, ""},
	}
	for _, tt := range tests {
		if got := maskAddress(tt.ip, tt.prefix); got != tt.want {
			t.Errorf("maskAddress(%q, %d) = %q, want %q", tt.ip, tt.prefix, got, tt.want)
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

// TestMultipartValues: the non-file parts of a multipart form are fields,
// in order; a file part is none; a part with a transfer encoding (read
// raw by some frameworks, decoded by others) or a body that does not
// parse with its boundary is unparsable.
func TestMultipartValues(t *testing.T) {
	t.Parallel()
	part := func(headers, value string) string { return "--XB\r\n" + headers + "\r\n\r\n" + value + "\r\n" }
	tests := []struct {
		name, body string
		want       string
		err        bool
	}{
		{"one field", part(`Content-Disposition: form-data; name="username"`, "carol") + "--XB--\r\n", "carol", false},
		{"duplicates and case", part(`Content-Disposition: form-data; name="username"`, "a") + part(`Content-Disposition: form-data; name="Username"`, "b") + "--XB--\r\n", "a|b", false},
		{"a file part", part(`Content-Disposition: form-data; name="username"; filename="u.txt"`, "x") + "--XB--\r\n", "", false},
		{"transfer encoding", part("Content-Disposition: form-data; name=\"username\"\r\nContent-Transfer-Encoding: base64", "Y2Fyb2w=") + "--XB--\r\n", "", true},
		{"another boundary", "--YB\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\ncarol\r\n--YB--\r\n", "", true},
		{"cut", part(`Content-Disposition: form-data; name="username"`, "carol"), "", true},
	}
	for _, tt := range tests {
		got, err := multipartValues([]byte(tt.body), "XB", fieldMatcher{name: "username"})
		if strings.Join(got, "|") != tt.want || (err != nil) != tt.err {
			t.Errorf("%s: %q, %v; want %q, error %v", tt.name, got, err, tt.want, tt.err)
		}
	}
	if _, err := multipartValues([]byte("x"), "", fieldMatcher{name: "username"}); err == nil {
		t.Error("no boundary: read")
	}
}
