package idempotency

import (
	"strings"
	"testing"
)

func TestStorageKey(t *testing.T) {
	tests := []struct{ scope, key, want string }{
		{"acme", "k1", "acme|k1"},
		{"", "k", "|k"},
		{"a|b", "c", "a%7Cb|c"},
		{"a", "b|c", "a|b%7Cc"},
		{"a%7Cb", "c", "a%257Cb|c"},
		{"t{x}", "{k}", "t%7Bx%7D|%7Bk%7D"},
		{"t", "a b:c#", "t|a%20b%3Ac%23"},
	}
	for _, tc := range tests {
		if got := StorageKey(tc.scope, tc.key); got != tc.want {
			t.Errorf("StorageKey(%q, %q) = %q, want %q", tc.scope, tc.key, got, tc.want)
		}
	}
	long := StorageKey(strings.Repeat("t", 200), "k")
	if !strings.HasPrefix(long, "#") || len(long) != 1+64+2 {
		t.Errorf("long scope not hashed: %q", long)
	}
}

// FuzzStorageKey: two different (scope, key) pairs never share a storage
// key, and none holds a hash-tag brace.
func FuzzStorageKey(f *testing.F) {
	f.Add("a|b", "c", "a", "b|c")
	f.Add("a", "#", "a", "%23")
	f.Fuzz(func(t *testing.T, s1, k1, s2, k2 string) {
		a, b := StorageKey(s1, k1), StorageKey(s2, k2)
		if strings.ContainsAny(a, "{}") {
			t.Fatalf("StorageKey(%q, %q) = %q holds a brace", s1, k1, a)
		}
		if a == b && (s1 != s2 || k1 != k2) {
			t.Fatalf("(%q, %q) and (%q, %q) share %q", s1, k1, s2, k2, a)
		}
	})
}
