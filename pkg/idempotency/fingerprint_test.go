package idempotency

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
)

func TestFingerprintDistinguishes(t *testing.T) {
	base := NewFingerprint("POST", "/orders", []byte(`{"a":1}`), []Header{{Name: "X-Tenant-Plan", Value: "gold"}})
	same := []Fingerprint{
		NewFingerprint("POST", "/orders", []byte(`{"a":1}`), []Header{{Name: "x-tenant-plan", Value: "gold"}}),
	}
	different := map[string]Fingerprint{
		"method":         NewFingerprint("PUT", "/orders", []byte(`{"a":1}`), []Header{{Name: "x-tenant-plan", Value: "gold"}}),
		"path":           NewFingerprint("POST", "/orders?x=1", []byte(`{"a":1}`), []Header{{Name: "x-tenant-plan", Value: "gold"}}),
		"body":           NewFingerprint("POST", "/orders", []byte(`{"a":2}`), []Header{{Name: "x-tenant-plan", Value: "gold"}}),
		"header value":   NewFingerprint("POST", "/orders", []byte(`{"a":1}`), []Header{{Name: "x-tenant-plan", Value: "free"}}),
		"header absent":  NewFingerprint("POST", "/orders", []byte(`{"a":1}`), nil),
		"header empty":   NewFingerprint("POST", "/orders", []byte(`{"a":1}`), []Header{{Name: "x-tenant-plan", Value: ""}}),
		"shifted fields": NewFingerprint("POST/", "orders", []byte(`{"a":1}`), []Header{{Name: "x-tenant-plan", Value: "gold"}}),
	}
	for _, f := range same {
		if f != base {
			t.Errorf("header name case changed the fingerprint")
		}
	}
	for name, f := range different {
		if f == base {
			t.Errorf("a different %s gave the same fingerprint", name)
		}
	}
	a := NewFingerprint("POST", "/", nil, []Header{{Name: "a", Value: "1"}, {Name: "b", Value: "2"}})
	b := NewFingerprint("POST", "/", nil, []Header{{Name: "b", Value: "2"}, {Name: "a", Value: "1"}})
	if a != b {
		t.Error("the order of different header names changed the fingerprint")
	}
	c := NewFingerprint("POST", "/", nil, []Header{{Name: "a", Value: "2"}, {Name: "a", Value: "1"}})
	d := NewFingerprint("POST", "/", nil, []Header{{Name: "a", Value: "1"}, {Name: "a", Value: "2"}})
	if c == d {
		t.Error("the order of a repeated header's values did not change the fingerprint")
	}
	if p, err := ParseFingerprint(base.String()); err != nil || p != base {
		t.Errorf("ParseFingerprint(String()) = %v, %v", p, err)
	}
	for _, bad := range []string{"", "zz", strings.Repeat("g", 64), base.String()[1:]} {
		if _, err := ParseFingerprint(bad); err == nil {
			t.Errorf("ParseFingerprint(%q) succeeded", bad)
		}
	}
}

// decodeFingerprint inverts encodeFingerprint; the fuzz test uses it to
// prove the encoding unambiguous (an invertible encoding cannot map two
// different inputs to the same bytes).
func decodeFingerprint(t *testing.T, b []byte) (method, path string, bodySum []byte, hs []Header) {
	t.Helper()
	field := func() string {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			t.Fatalf("bad field length in encoding")
		}
		s := string(b[k : k+int(n)])
		b = b[k+int(n):]
		return s
	}
	if v := field(); v != fingerprintVersion {
		t.Fatalf("version %q", v)
	}
	method, path, bodySum = field(), field(), []byte(field())
	n, k := binary.Uvarint(b)
	if k <= 0 {
		t.Fatal("bad header count")
	}
	b = b[k:]
	for range n {
		hs = append(hs, Header{Name: field(), Value: field()})
	}
	if len(b) != 0 {
		t.Fatalf("%d trailing bytes", len(b))
	}
	return method, path, bodySum, hs
}

// FuzzFingerprint: the hashed encoding decodes back to exactly its input
// (normalised: names lower-cased, sorted stably), so it is unambiguous, and
// the fingerprint does not depend on the order of different header names.
func FuzzFingerprint(f *testing.F) {
	f.Add("POST", "/orders", []byte("{}"), "X-A", "1", "x-b", "2")
	f.Add("", "", []byte(nil), "", "", "", "")
	f.Fuzz(func(t *testing.T, method, path string, body []byte, n1, v1, n2, v2 string) {
		hs := []Header{{Name: n1, Value: v1}, {Name: n2, Value: v2}}
		enc := encodeFingerprint(method, path, body, hs)
		m, p, sum, got := decodeFingerprint(t, enc)
		want := normalise(hs)
		if m != method || p != path || len(got) != len(want) {
			t.Fatalf("decoded %q %q %v, want %q %q %v", m, p, got, method, path, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("header %d decoded %v, want %v", i, got[i], want[i])
			}
		}
		if ref := NewFingerprint(method, path, body, nil); len(sum) != 32 || bytes.Equal(sum, ref[:]) && len(body) > 0 {
			t.Fatalf("body digest field malformed")
		}
		if !strings.EqualFold(n1, n2) {
			swapped := NewFingerprint(method, path, body, []Header{hs[1], hs[0]})
			if swapped != NewFingerprint(method, path, body, hs) {
				t.Fatal("header order changed the fingerprint")
			}
		}
	})
}

func normalise(hs []Header) []Header {
	out := make([]Header, len(hs))
	for i, h := range hs {
		out[i] = Header{Name: strings.ToLower(h.Name), Value: h.Value}
	}
	if len(out) == 2 && out[1].Name < out[0].Name {
		out[0], out[1] = out[1], out[0]
	}
	return out
}
