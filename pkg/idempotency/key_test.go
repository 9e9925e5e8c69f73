package idempotency

import (
	"errors"
	"strings"
	"testing"
)

func TestParseKey(t *testing.T) {
	long := strings.Repeat("k", MaxKeyLen)
	tests := []struct {
		field, want string
		ok          bool
	}{
		{"8e03978e-40d5-43e8-bc93-6894a57f9324", "8e03978e-40d5-43e8-bc93-6894a57f9324", true},
		{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`, "8e03978e-40d5-43e8-bc93-6894a57f9324", true},
		{`  "padded"	`, "padded", true},
		{`"with space, and comma"`, "with space, and comma", true},
		{`"esc \"q\" and \\"`, `esc "q" and \`, true},
		{long, long, true},
		{`"` + long + `"`, long, true},
		{`"` + strings.Repeat(`\\`, MaxKeyLen) + `"`, strings.Repeat(`\`, MaxKeyLen), true},
		{"a;b=c/d:e{f}|g", "a;b=c/d:e{f}|g", true},

		{"", "", false},
		{"   ", "", false},
		{`""`, "", false},
		{long + "k", "", false},
		{`"` + long + `k"`, "", false},
		{"two words", "", false},
		{"a,b", "", false},      // what Envoy makes of two Idempotency-Key fields
		{`"a", "b"`, "", false}, // the same, quoted
		{`"a";p=1`, "", false},  // parameters are not accepted
		{`"unterminated`, "", false},
		{`"bad \n escape"`, "", false},
		{`"trailing \`, "", false},
		{"caf\xc3\xa9", "", false},
		{"nul\x00", "", false},
		{"\"tab\tinside\"", "", false},
		{`back\slash`, "", false},
		{`mid"quote`, "", false},
	}
	for _, tc := range tests {
		got, err := ParseKey(tc.field)
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("ParseKey(%q) = %q, %v; want %q, ok=%v", tc.field, got, err, tc.want, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidKey) {
			t.Errorf("ParseKey(%q) error %v does not wrap ErrInvalidKey", tc.field, err)
		}
	}
}

// FuzzParseKey: whatever the header holds, ParseKey never panics, and what
// it accepts is a valid stored key that, quoted again as an sf-string,
// parses back to itself.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"abc", `"abc"`, `"a\"b\\c"`, "", `"`, `"\`, "a,b", strings.Repeat("x", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, field string) {
		key, err := ParseKey(field)
		if err != nil {
			if !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("error %v does not wrap ErrInvalidKey", err)
			}
			return
		}
		if !ValidKey(key) {
			t.Fatalf("ParseKey(%q) = %q, which ValidKey refuses", field, key)
		}
		quoted := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
		if again, err := ParseKey(quoted); err != nil || again != key {
			t.Fatalf("re-quoted %q parses to %q, %v; want %q", quoted, again, err, key)
		}
	})
}
