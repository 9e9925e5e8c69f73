package inflight_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit/inflight"
)

func TestStorageKey(t *testing.T) {
	long := strings.Repeat("a", 200)
	for _, c := range []struct{ in, want string }{
		{"acme|/reports", "acme|/reports"},
		{"a{b}:c", "a%7Bb%7D%3Ac"},
		{"50%", "50%25"},
		{"#x", "%23x"},
		{"sp ace\xff", "sp%20ace%FF"},
		{"", ""},
	} {
		if got := inflight.StorageKey(c.in); got != c.want {
			t.Errorf("StorageKey(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	if got := inflight.StorageKey(long); !strings.HasPrefix(got, "#") || len(got) != 65 {
		t.Errorf("StorageKey(200 bytes) = %q, want # + hex SHA-256", got)
	}
}

// FuzzStorageKey: no key breaks the hash tag or the key separator, and
// distinct keys never share a storage key.
func FuzzStorageKey(f *testing.F) {
	for _, s := range []string{"", "a", "{", "}", ":", "%7B", "#", strings.Repeat("x", 129)} {
		f.Add(s, s+"}")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ka, kb := inflight.StorageKey(a), inflight.StorageKey(b)
		if strings.ContainsAny(ka, "{}:") {
			t.Fatalf("StorageKey(%q) = %q holds a brace or ':'", a, ka)
		}
		if a != b && ka == kb {
			t.Fatalf("StorageKey(%q) == StorageKey(%q) = %q", a, b, ka)
		}
	})
}

func TestChecks(t *testing.T) {
	if err := inflight.CheckAcquire(1, time.Millisecond); err != nil {
		t.Errorf("CheckAcquire(1, 1ms) = %v", err)
	}
	for _, err := range []error{
		inflight.CheckAcquire(0, time.Second),
		inflight.CheckAcquire(1, time.Millisecond-1),
		inflight.CheckTTL(-time.Second),
	} {
		if !errors.Is(err, inflight.ErrInvalid) {
			t.Errorf("got %v, want ErrInvalid", err)
		}
	}
	if a, b := inflight.NewSlot(), inflight.NewSlot(); a == b || len(a) != 32 {
		t.Errorf("NewSlot gave %q and %q", a, b)
	}
}
