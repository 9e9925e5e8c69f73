package redisclient

import "testing"

func TestKeyPrefix(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"", DefaultPrefix, true},
		{"tenant-a", "tenant-a", true},
		{"a{b", "", false},
		{"}", "", false},
	} {
		got, err := KeyPrefix(tc.in)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("KeyPrefix(%q) = %q, %v; want %q, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}
