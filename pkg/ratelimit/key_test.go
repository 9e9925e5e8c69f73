package ratelimit

import (
	"slices"
	"strings"
	"testing"
)

// keyInput is one argument set of Key.
type keyInput struct {
	tenant, domain string
	entries        []Entry
}

func (in keyInput) key() string { return Key(in.tenant, in.domain, in.entries) }

func (in keyInput) equal(o keyInput) bool {
	return in.tenant == o.tenant && in.domain == o.domain && slices.Equal(in.entries, o.entries)
}

// adversarial values: separators, braces, escape and hash markers, control
// bytes, invalid UTF-8, a value that looks escaped, and long values.
var adversarial = []string{
	"", "{", "}", "{tag}", "}{", ":", "|", "=", "%", "%7B", "#", "#" + strings.Repeat("0", 64),
	"\n", "a\r\nb", "\x00", "\xff\xfe", "é", "a|b", "b|c", "k=v", "x:y:z",
	strings.Repeat("a", MaxPartLen), strings.Repeat("a", MaxPartLen+1),
	strings.Repeat("{", 10*1024), strings.Repeat("é|", 5*1024),
}

func TestKeyHasOnlyPrintableASCIIAndNoBraces(t *testing.T) {
	t.Parallel()
	for _, v := range adversarial {
		for _, in := range []keyInput{
			{v, "d", nil}, {"t", v, nil}, {"t", "d", []Entry{{v, "x"}}},
			{"t", "d", []Entry{{"k", v}, {v, v}}},
		} {
			k := in.key()
			for i := 0; i < len(k); i++ {
				if c := k[i]; c == '{' || c == '}' || c < 0x21 || c > 0x7e {
					t.Fatalf("Key(%q, %q, %q) = %q: byte %q at %d", in.tenant, in.domain, in.entries, k, c, i)
				}
			}
			// Each part is at most MaxPartLen (or a 65-byte hash) long.
			if most := 4 * (MaxPartLen + 1); len(k) > most {
				t.Errorf("Key of %d-byte input is %d bytes, want <= %d", len(v), len(k), most)
			}
		}
	}
}

func TestKeyDistinctInputsGiveDistinctKeys(t *testing.T) {
	t.Parallel()
	inputs := []keyInput{
		// Separators moved between parts.
		{"a|b", "c", nil}, {"a", "b|c", nil}, {"a", "b", []Entry{{"c", ""}}},
		{"t", "d", []Entry{{"k=v", ""}}}, {"t", "d", []Entry{{"k", "=v"}}}, {"t", "d", []Entry{{"k=", "v"}}},
		{"t", "d", []Entry{{"a", "b|c=d"}}}, {"t", "d", []Entry{{"a", "b"}, {"c", "d"}}},
		// Empty parts and entry counts.
		{"", "", nil}, {"", "", []Entry{{"", ""}}}, {"", "", []Entry{{"", ""}, {"", ""}}},
		{"|", "", nil}, {"", "|", nil},
		// A raw value equal to another's escaped form, or to a hash.
		{"%7C", "d", nil}, {"|", "d", nil}, {"%257C", "d", nil},
		{strings.Repeat("a", MaxPartLen+1), "d", nil}, {strings.Repeat("a", MaxPartLen+2), "d", nil},
		// Bytes that are not UTF-8, and their replacement character.
		{"\xff", "d", nil}, {"\uFFFD", "d", nil}, {"%FF", "d", nil},
	}
	for _, v := range adversarial {
		inputs = append(inputs, keyInput{v, "d", nil}, keyInput{"t", "d", []Entry{{"k", v}}})
	}
	seen := map[string]keyInput{}
	for _, in := range inputs {
		k := in.key()
		if prev, dup := seen[k]; dup && !prev.equal(in) {
			t.Errorf("Key collision %q: %+v and %+v", k, prev, in)
		}
		seen[k] = in
	}
}

// decodeKeyInput turns arbitrary bytes into a Key input: length-prefixed
// strings (one byte of length each) for tenant, domain, then entry keys and
// values, so that fuzzing reaches every byte in every position.
func decodeKeyInput(b []byte) keyInput {
	next := func() (string, bool) {
		if len(b) == 0 {
			return "", false
		}
		n := min(int(b[0]), len(b)-1)
		s := string(b[1 : 1+n])
		b = b[1+n:]
		return s, true
	}
	var in keyInput
	in.tenant, _ = next()
	in.domain, _ = next()
	for {
		k, ok := next()
		if !ok {
			return in
		}
		v, _ := next()
		in.entries = append(in.entries, Entry{k, v})
	}
}

// FuzzKeyInjective: equal keys imply equal inputs, and no key holds a brace.
func FuzzKeyInjective(f *testing.F) {
	f.Add([]byte("\x03a|b\x01c"), []byte("\x01a\x03b|c"))
	f.Add([]byte("\x01t\x01d\x01k\x01v"), []byte("\x01t\x01d\x03k=v\x00"))
	f.Add([]byte("\x03%7C"), []byte("\x01|"))
	f.Add([]byte{0x02, 0xff, '{'}, []byte{0x02, '}', 0xfe})
	f.Fuzz(func(t *testing.T, a, b []byte) {
		x, y := decodeKeyInput(a), decodeKeyInput(b)
		kx, ky := x.key(), y.key()
		if strings.ContainsAny(kx, "{}") {
			t.Fatalf("Key(%+v) = %q holds a brace", x, kx)
		}
		if kx == ky && !x.equal(y) {
			t.Fatalf("Key collision %q: %+v and %+v", kx, x, y)
		}
	})
}
